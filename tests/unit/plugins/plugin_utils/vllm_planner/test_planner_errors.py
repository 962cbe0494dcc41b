"""Malformed or contradictory input: each fails with an error naming the field, no traceback."""

from __future__ import annotations

from typing import Any

import pytest
from _models import NOTES_CONFIG, QWEN25_72B, WORKLOAD
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner import (
    PlanError,
    kv_plan,
)

# The notes' config.json, verbatim: "torch_dtype":"bfloat16, is an unterminated string.
GOOD: dict[str, Any] = {"gpu": "H200", "tensor_parallel_size": 2}


def cfg(**changes: Any) -> dict[str, Any]:
    out = {**QWEN25_72B, **changes}
    return {k: v for k, v in out.items() if v is not None}


CORPUS: list[tuple[str, object, dict[str, Any], str]] = [
    ("notes' malformed config.json", NOTES_CONFIG, GOOD, "config"),
    ("config is a list", [1, 2], GOOD, "config"),
    ("layers missing", cfg(num_hidden_layers=None), GOOD, "config.num_hidden_layers"),
    ("layers not numeric", cfg(num_hidden_layers="eighty"), GOOD, "config.num_hidden_layers"),
    ("zero KV heads", cfg(num_key_value_heads=0), GOOD, "config.num_key_value_heads"),
    ("KV heads do not divide heads", cfg(num_key_value_heads=7), GOOD,
     "config.num_key_value_heads"),
    ("head_dim not derivable", cfg(hidden_size=8190), GOOD, "config.head_dim"),
    ("unknown model dtype", cfg(torch_dtype="bfloat17"), GOOD, "config.torch_dtype"),
    ("nested text_config not a mapping", {"text_config": "qwen"}, GOOD, "config.text_config"),
    ("tp does not divide heads", QWEN25_72B, {**GOOD, "tensor_parallel_size": 3},
     "tensor_parallel_size"),
    ("tp zero", QWEN25_72B, {**GOOD, "tensor_parallel_size": 0}, "tensor_parallel_size"),
    ("utilization above 1", QWEN25_72B, {**GOOD, "gpu_memory_utilization": 1.2},
     "gpu_memory_utilization"),
    ("utilization zero", QWEN25_72B, {**GOOD, "gpu_memory_utilization": 0},
     "gpu_memory_utilization"),
    ("utilization as percent string", QWEN25_72B, {**GOOD, "gpu_memory_utilization": "88%"},
     "gpu_memory_utilization"),
    ("unknown GPU", QWEN25_72B, {**GOOD, "gpu": "B300"}, "gpu"),
    ("custom GPU without memory", QWEN25_72B, {**GOOD, "gpu": {"name": "X1"}},
     "gpu.memory_bytes"),
    ("no GPU", QWEN25_72B, {"tensor_parallel_size": 2}, "gpu"),
    ("unknown kv dtype", QWEN25_72B, {**GOOD, "kv_cache_dtype": "int4"}, "kv_cache_dtype"),
    ("unparseable vLLM version", QWEN25_72B, {**GOOD, "vllm_version": "latest"},
     "vllm_version"),
    ("prehistoric vLLM version", QWEN25_72B, {**GOOD, "vllm_version": "0.2.7"},
     "vllm_version"),
    ("unknown option (typo)", QWEN25_72B, {**GOOD, "tensor_paralel_size": 2},
     "tensor_paralel_size"),
    ("workload p95 below p50", QWEN25_72B,
     {**GOOD, "workload": {**WORKLOAD, "prompt_tokens_p95": 100}}, "workload.prompt_tokens_p95"),
    ("workload key missing", QWEN25_72B,
     {**GOOD, "workload": {k: v for k, v in WORKLOAD.items() if k != "concurrency"}},
     "workload.concurrency"),
    ("workload negative", QWEN25_72B, {**GOOD, "workload": {**WORKLOAD, "concurrency": -4}},
     "workload.concurrency"),
    ("unknown hazard override", QWEN25_72B,
     {**GOOD, "hazard_overrides": {"oom": "because we said so"}}, "hazard_overrides.oom"),
    ("block size not supported", QWEN25_72B, {**GOOD, "block_size": 24}, "block_size"),
    ("contradictory quantization", cfg(quantization_config={"quant_method": "gptq", "bits": 8}),
     {**GOOD, "quantization": "fp8"}, "quantization"),
    ("quantization bits missing", cfg(quantization_config={"quant_method": "awq"}), GOOD,
     "config.quantization_config.bits"),
    ("batched tokens below context without chunking", QWEN25_72B,
     {**GOOD, "vllm_version": "0.6.2", "enable_chunked_prefill": False, "max_model_len": 8192,
      "max_num_batched_tokens": 4096}, "max_num_batched_tokens"),
    ("batched tokens below max_num_seqs", QWEN25_72B,
     {**GOOD, "max_num_seqs": 256, "max_num_batched_tokens": 128, "max_model_len": 4096,
      "refuse_hazards": False}, "max_num_batched_tokens"),
    ("api key on the command line", QWEN25_72B, {**GOOD, "extra_flags": {"api-key": "s3cret"}},
     "extra_flags.api-key"),
    ("planner-owned flag smuggled in", QWEN25_72B,
     {**GOOD, "extra_flags": {"--max-num-seqs": 512}}, "extra_flags.--max-num-seqs"),
    ("bad safetensors index", QWEN25_72B, {**GOOD, "safetensors_index": {"metadata": {}}},
     "safetensors_index.metadata.total_size"),
    ("weights_bytes negative", QWEN25_72B, {**GOOD, "weights_bytes": -1}, "weights_bytes"),
    ("boolean option given a string", QWEN25_72B, {**GOOD, "enable_chunked_prefill": "yes"},
     "enable_chunked_prefill"),
    # Issue 20 item 9: a served model name clients cannot send.
    ("empty served model name", QWEN25_72B, {**GOOD, "served_model_name": ""},
     "served_model_name"),
    ("blank served model name", QWEN25_72B, {**GOOD, "served_model_name": "   "},
     "served_model_name"),
    ("served model name with surrounding spaces", QWEN25_72B,
     {**GOOD, "served_model_name": " qwen "}, "served_model_name"),
]


def test_corpus_is_large_enough() -> None:
    assert len(CORPUS) >= 15


@pytest.mark.parametrize(("config", "opts", "field"), [c[1:] for c in CORPUS],
                         ids=[c[0] for c in CORPUS])
def test_bad_input_names_the_field_and_the_fix(config: object, opts: dict[str, Any],
                                               field: str) -> None:
    with pytest.raises(PlanError) as err:
        kv_plan(config, **opts)
    assert err.value.field == field
    message = str(err.value)
    assert message.startswith(f"kv_plan: {field}: ")
    assert "Fix: " in message and "Traceback" not in message


def test_served_model_name_left_out_serves_the_model_path() -> None:
    argv = kv_plan(QWEN25_72B, **GOOD, model="/srv/m", served_model_name=None,
                   max_model_len=32768)["argv"]
    assert argv[:3] == ["vllm", "serve", "/srv/m"] and "--served-model-name" not in argv
