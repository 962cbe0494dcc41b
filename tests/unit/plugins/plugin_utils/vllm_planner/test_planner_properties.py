"""Properties the planner must keep for every geometry, GPU and workload."""

from __future__ import annotations

from typing import Any

from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner import (
    PlanError,
    kv_plan,
)
from hypothesis import given, settings
from hypothesis import strategies as st

geometries = st.builds(
    lambda layers, kv, ratio, head_dim, vocab, inter: {
        "num_hidden_layers": layers, "num_key_value_heads": kv,
        "num_attention_heads": kv * ratio, "head_dim": head_dim,
        "hidden_size": kv * ratio * head_dim, "vocab_size": vocab,
        "intermediate_size": inter, "max_position_embeddings": 131072,
        "torch_dtype": "bfloat16"},
    layers=st.integers(2, 96), kv=st.sampled_from([1, 2, 4, 8, 16]),
    ratio=st.sampled_from([1, 2, 4, 8]), head_dim=st.sampled_from([64, 96, 128, 256]),
    vocab=st.integers(1000, 262144), inter=st.integers(256, 32768),
)
workloads = st.builds(
    lambda p50, p95x, o50, o95x, conc: {
        "prompt_tokens_p50": p50, "prompt_tokens_p95": p50 * p95x, "output_tokens_p50": o50,
        "output_tokens_p95": o50 * o95x, "concurrency": conc},
    p50=st.integers(16, 4096), p95x=st.integers(1, 6), o50=st.integers(1, 2048),
    o95x=st.integers(1, 4), conc=st.integers(1, 2048),
)
gpus = st.sampled_from(["H100-SXM", "H100-NVL", "H200", "A100-80GB"])
tps = st.sampled_from([1, 2, 4, 8])


def plan(config: dict[str, Any], **opts: Any) -> dict[str, Any]:
    return kv_plan(config, refuse_hazards=False, **opts)


@settings(max_examples=150, deadline=None)
@given(config=geometries, gpu=gpus, tp=tps, u1=st.floats(0.3, 0.99), u2=st.floats(0.3, 0.99))
def test_more_utilization_never_shrinks_the_pool(config: dict[str, Any], gpu: str, tp: int,
                                                 u1: float, u2: float) -> None:
    low, high = sorted((u1, u2))
    fixed = {"gpu": gpu, "tensor_parallel_size": tp, "max_num_seqs": 64, "max_model_len": 4096}
    try:
        a = plan(config, gpu_memory_utilization=low, **fixed)
    except PlanError:
        return  # tp does not fit this geometry
    b = plan(config, gpu_memory_utilization=high, **fixed)
    assert b["kv_pool_bytes_per_gpu"] >= a["kv_pool_bytes_per_gpu"]
    assert b["num_gpu_blocks"] >= a["num_gpu_blocks"]


@settings(max_examples=150, deadline=None)
@given(config=geometries, tp=tps)
def test_fp8_exactly_halves_bf16_kv_bytes(config: dict[str, Any], tp: int) -> None:
    try:
        bf16 = plan(config, gpu="H200", tensor_parallel_size=tp, kv_cache_dtype="auto")
    except PlanError:
        return
    fp8 = plan(config, gpu="H200", tensor_parallel_size=tp, kv_cache_dtype="fp8")
    assert bf16["kv_bytes_per_token"] == 2 * fp8["kv_bytes_per_token"]


@settings(max_examples=200, deadline=None)
@given(config=geometries, gpu=gpus, tp=tps, workload=workloads,
       version=st.sampled_from(["0.6.2", "0.8.5", "0.11.0", "0.32.0"]))
def test_planned_max_num_seqs_fits_the_planned_pool(config: dict[str, Any], gpu: str, tp: int,
                                                    workload: dict[str, int],
                                                    version: str) -> None:
    try:
        result = plan(config, gpu=gpu, tensor_parallel_size=tp, workload=workload,
                      vllm_version=version)
    except PlanError:
        return
    flags = result["flags"]
    if result["num_gpu_blocks"] == 0:
        assert any(h["id"] == "weights_exceed_memory" for h in result["hazards"])
        return
    p95 = workload["prompt_tokens_p95"] + workload["output_tokens_p95"]
    blocks_per_seq = -(-p95 // result["block_size"])
    storm = any(h["id"] == "preemption_storm" for h in result["hazards"])
    assert storm == (flags["max_num_seqs"] * blocks_per_seq > result["num_gpu_blocks"])
    if blocks_per_seq <= 0.9 * result["num_gpu_blocks"]:
        assert not storm
        assert flags["max_num_seqs"] * p95 <= result["kv_pool_tokens"]


junk = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10**12) | st.floats(allow_nan=True)
    | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.sampled_from(["num_hidden_layers", "num_attention_heads",
                                       "hidden_size", "num_key_value_heads", "head_dim",
                                       "text_config", "torch_dtype", "quantization_config",
                                       "kv_lora_rank", "vocab_size", "rope_scaling"]),
                      children, max_size=8),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(config=junk, tp=junk, util=junk, workload=junk)
def test_junk_input_only_ever_raises_plan_error(config: object, tp: object, util: object,
                                                workload: object) -> None:
    try:
        kv_plan(config, gpu="H200", tensor_parallel_size=tp, gpu_memory_utilization=util,
                workload=workload, refuse_hazards=False)
    except PlanError as exc:
        assert exc.field and "Fix:" in str(exc)
