"""Each release's own `vllm serve` parser accepts every replica's argv (issue 38).

tests/oracle/argv_check.py runs the argv through what `vllm serve` does before it loads a
model, with one release's own code. The verdicts are stored per release, like the KV oracle's
(tests/data/oracle/argv-<release>.json), so `make unit` checks today's argv against them with
no vLLM installed; `make oracle VLLM=<release>` regenerates them from the release's wheel.

The argv: every replica of every group of the example inventory, planned for each release as
roles/vllm_plan plans it, plus the flags the planner writes only on request (the measured KV
sizing of 0.34, the float32 Mamba state, a given block size).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner.group import (
    plan_group,
)
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner.replicas import (
    plan_replicas,
)
from planner_golden import as_role_passes, inventory_option_sets
from test_kv_oracle import (
    FP8_CHECKPOINT,
    LIVE_RELEASE,
    RELEASES,
    STORED,
    _config,
    run_in_vllm,
    stored_verdicts,
)

ROOT = Path(__file__).resolve().parents[5]
CHECK = ROOT / "tests" / "oracle" / "argv_check.py"
# Flags the planner writes only when asked, on the example's hybrid and dense groups.
VARIANTS: dict[str, dict[str, Any]] = {
    "": {},
    "+measured": {"kv_cache_sizing": "measured"},
    "+ssm-float32+block-32": {"mamba_ssm_cache_dtype": "float32", "block_size": 32},
}


def _variant_applies(name: str, release: str) -> bool:
    return name != "+measured" or release >= "0.34.0"


# One engine across hosts (plan_group): (case, config, hosts, GPU, extra kv_plan options).
GROUPS: list[tuple[str, dict[str, Any], int, str, dict[str, Any]]] = [
    ("Qwen3.8-2.4T-A95B-FP8/4xH200",
     {**_config("Qwen3.8-2.4T-A95B"), "quantization_config": FP8_CHECKPOINT}, 4, "H200", {}),
    ("Qwen3.5-397B-A17B/2xH100", _config("Qwen3.5-397B-A17B"), 2, "H100-SXM", {}),
]


def _group_argvs(release: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, config, hosts, gpu, extra in GROUPS:
        model = name.split("/", maxsplit=1)[0]
        opts = {**as_role_passes({"gpu": gpu, **extra}, model), "vllm_version": release,
                "install_source": "site", "port": 8000}
        names = [f"gpu-{i}.example" for i in range(hosts)]
        for rank in plan_group(config, names, 8, 29501, **opts):
            out[f"group/{name}/rank-{rank['rank']}"] = list(rank["argv"])
    return out


def _argvs(release: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for group, (options, gpus, model) in inventory_option_sets().items():
        if not group.startswith("example/") or model is None:
            continue
        config = (ROOT / "inventories" / "example" / "models" / model / "config.json").read_text()
        for variant, extra in VARIANTS.items():
            if not _variant_applies(variant, release):
                continue
            if "mamba_ssm_cache_dtype" in extra and "linear_attention" not in config:
                continue
            opts = {**as_role_passes({**options, **extra}, model), "vllm_version": release,
                    "install_source": "site"}
            for replica in plan_replicas(config, gpus, 8000, **opts):
                out[f"{group}{variant}/{replica['name']}"] = list(replica["plan"]["argv"])
    return {**out, **_group_argvs(release)}


def _stored(release: str) -> dict[str, Any]:
    return stored_verdicts("argv", release)


def _run_check(payload: str) -> list[dict[str, Any]]:
    return run_in_vllm(CHECK, payload)


def test_the_cases_cover_every_example_group_and_the_optional_flags() -> None:
    argvs = _argvs("0.34.0")
    groups = {ident.split("/")[2].split("+")[0] for ident in argvs
              if not ident.startswith("group/")}
    assert groups == {"h100.yml", "h100_qwen3next.yml", "h200.yml", "h200_qwen35.yml"}
    joined = [" ".join(argv) for argv in argvs.values()]
    for flag in ("--kv-cache-memory-bytes", "--gpu-memory-utilization", "--speculative-config",
                 "--mamba-ssm-cache-dtype", "--block-size 32", "--pipeline-parallel-size 4",
                 "--node-rank 3", "--headless"):
        assert any(flag in line for line in joined), flag


@pytest.mark.parametrize("release", RELEASES)
def test_every_replica_argv_is_accepted_by_its_release(release: str) -> None:
    stored = _stored(release)
    argvs = _argvs(release)
    stale = sorted(i for i in argvs.keys() | stored["cases"].keys()
                   if argvs.get(i) != stored["cases"].get(i, {}).get("argv"))
    assert not stale, (f"{len(stale)} argv changed since tests/data/oracle/argv-{release}.json "
                       f"was generated (e.g. {stale[0]}): make oracle VLLM={release}")
    refused = {i: c["verdict"] for i, c in stored["cases"].items()
               if not c["verdict"]["accepted"] or c["verdict"]["deprecated"]}
    assert not refused, yaml.safe_dump(refused)


@pytest.mark.skipif(LIVE_RELEASE is None, reason="live vLLM: make oracle [VLLM=<release>]")
def test_every_replica_argv_is_accepted_by_the_live_release() -> None:
    release = str(LIVE_RELEASE)
    argvs = _argvs(release)
    results = _run_check(json.dumps([{"id": i, "argv": a} for i, a in argvs.items()]))
    assert {r["release"] for r in results} == {release}
    verdicts = {r["id"]: {k: v for k, v in r.items() if k not in ("id", "release")}
                for r in results}
    if os.environ.get("KV_ORACLE_WRITE") == "1":
        data = {"release": release, "regenerate": f"make oracle VLLM={release}",
                "cases": {i: {"argv": argvs[i], "verdict": verdicts[i]} for i in argvs}}
        (STORED / f"argv-{release}.json").write_text(json.dumps(data, indent=1, sort_keys=True)
                                                     + "\n")
    else:
        stored = {i: c["verdict"] for i, c in _stored(release)["cases"].items()}
        assert stored == verdicts, f"tests/data/oracle/argv-{release}.json differs from vLLM " \
                                   f"{release} itself: make oracle VLLM={release}"
    refused = {i: v for i, v in verdicts.items() if not v["accepted"] or v["deprecated"]}
    assert not refused, yaml.safe_dump(refused)
