"""The memory model against real vLLM start-ups (tests/data/vllm-startup-logs.jsonl).

Each row is a real engine log with its source; tests/data/configs/ holds the model's real
config.json fields. The planner must never promise a larger KV pool than the engine found
(under-promise), yet stay close on the current V1 engine.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner import kv_plan

DATA = Path(__file__).resolve().parents[4] / "data"
GIB = 1 << 30
ROUNDING = 0.01 * GIB  # logs print GiB with two decimals
# Rows whose profiling the planner does not model, with the reason.
EXCLUDED = {
    "meta-llama/Llama-3.2-11B-Vision": "encoder-decoder cross-attention profiling (mllama)",
}


def _configs() -> dict[str, dict[str, Any]]:
    out = {}
    for path in (DATA / "configs").glob("*.json"):
        out[path.stem.replace("__", "/").lower()] = json.loads(path.read_text())
    return out


def _version(row: dict[str, Any]) -> str:
    text = str(row["vllm_version"]).split(" ", maxsplit=1)[0].lstrip("v")
    return "0.6.5" if text.startswith("main") else text


def _rows() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    configs = _configs()
    rows = []
    for line in (DATA / "vllm-startup-logs.jsonl").read_text().splitlines():
        row = json.loads(line)
        model = row["model"].split(" ")[0]
        config = configs.get(model.lower()) or configs.get(model.lower() + "-hf")
        needed = ("gpu_mem_gib", "weights_gib", "available_kv_cache_gib",
                  "peak_activation_gib", "non_torch_gib")
        if config is None or model in EXCLUDED or any(row.get(k) is None for k in needed):
            continue
        if not isinstance(row["gpu_memory_utilization"], int | float) or row.get("pp", 1) != 1:
            continue  # utilization not logged, or pipeline parallel (not planned here)
        budget = row["gpu_mem_gib"] * row["gpu_memory_utilization"]
        parts = row["weights_gib"] + row["peak_activation_gib"] + row["non_torch_gib"]
        if abs(budget - parts - row["available_kv_cache_gib"]) > 0.1:
            continue  # the log's own figures do not add up (another GPU count or a partial log)
        rows.append((f"{model}@{_version(row)}/tp{row['tp']}", row, config))
    return rows


ROWS = _rows()


def _plan(row: dict[str, Any], config: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """Replay the row's start-up: vLLM's defaults of that era for the unlogged flags."""
    v1 = str(row["engine"]).startswith("V1")
    large = row["gpu_mem_gib"] > 70
    positions = config.get("max_position_embeddings") or (
        config.get("text_config") or {}).get("max_position_embeddings") or 8192
    max_model_len = row["max_model_len"] or positions
    opts: dict[str, Any] = {
        "gpu": {"name": str(row["gpu"]), "memory_bytes": int(row["gpu_mem_gib"] * GIB)},
        "tensor_parallel_size": row["tp"],
        "gpu_memory_utilization": row["gpu_memory_utilization"],
        "weights_bytes": int(row["weights_gib"] * GIB * row["tp"]),
        "max_num_seqs": 1024 if v1 and large else 256,
        "max_num_batched_tokens": (8192 if large else 2048) if v1 else max(max_model_len, 2048),
        "max_model_len": max_model_len,
        "vllm_version": _version(row),
        "kv_cache_dtype": "fp8" if row.get("kv_cache_dtype") == "fp8" else "auto",
        "refuse_hazards": False,
        **extra,
    }
    if not v1 and not _version(row).startswith(("0.8", "0.9", "0.10")):
        opts["enable_chunked_prefill"] = False  # V0 releases chunk only when asked
    dtype = str(row.get("dtype") or "")
    if "float32" in dtype:
        opts["dtype"] = "float32"
    elif dtype.endswith("float16") and "bfloat16" not in dtype:
        opts["dtype"] = "float16"
    return kv_plan(config, **opts)


def test_the_sample_is_broad() -> None:
    assert len(ROWS) >= 20
    assert len({r[1]["vllm_version"] for r in ROWS}) >= 4


@pytest.mark.parametrize(("row", "config"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_planner_never_promises_more_than_the_engine_found(row: dict[str, Any],
                                                           config: dict[str, Any]) -> None:
    plan = _plan(row, config)
    logged_reserve = (row["peak_activation_gib"] + row["non_torch_gib"]) * GIB
    assert plan["reserved_bytes_per_gpu"] >= logged_reserve - ROUNDING
    assert plan["kv_pool_bytes_per_gpu"] <= row["available_kv_cache_gib"] * GIB + ROUNDING


def test_planner_stays_close_on_the_v1_engine() -> None:
    """Within 15% everywhere, and a median shortfall of at most 0.5 GiB per GPU (issue 38)."""
    ratios, shortfalls = [], []
    for _ident, row, config in ROWS:
        if str(row["engine"]).startswith("V1"):
            plan = _plan(row, config)
            found = row["available_kv_cache_gib"] * GIB
            ratios.append(plan["kv_pool_bytes_per_gpu"] / found)
            shortfalls.append(found - plan["kv_pool_bytes_per_gpu"])
    assert ratios and min(ratios) >= 0.85, sorted(ratios)[:3]
    assert sorted(ratios)[len(ratios) // 2] >= 0.95
    assert statistics.median(shortfalls) <= 0.5 * GIB, statistics.median(shortfalls) / GIB


TOKEN_ROWS = [r for r in ROWS if r[1].get("kv_tokens") and r[1]["block_size"] == 16
              and not r[2].get("sliding_window") and not r[2].get("layer_types")
              and not r[2].get("text_config")]


@pytest.mark.parametrize(("row", "config"), [r[1:] for r in TOKEN_ROWS],
                         ids=[r[0] for r in TOKEN_ROWS])
def test_kv_bytes_per_token_matches_the_engines_token_count(row: dict[str, Any],
                                                            config: dict[str, Any]) -> None:
    pool = int(row["available_kv_cache_gib"] * GIB)
    # The per-token arithmetic is the same in every release; replay it on one that has the flag.
    plan = _plan(row, config, kv_cache_memory_bytes=pool, vllm_version="0.19.0",
                 enable_chunked_prefill=True)
    # The log rounds GiB to two decimals: allow that much memory, plus one block.
    slack = 0.005 * GIB / plan["kv_bytes_per_token"] + plan["block_size"]
    assert abs(plan["kv_pool_tokens"] - row["kv_tokens"]) <= slack
