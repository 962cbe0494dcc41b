"""Hybrid geometries (issue 21): layer kinds, vLLM's hybrid KV-cache manager, new options.

The block sizes below are the research notes' table (../shared/notes/vllm-hybrid-kv.md,
Appendix B), which reproduced every logged "Setting attention block size" line found; the
oracle (test_kv_oracle.py) checks the same arithmetic against vLLM's own functions.

They plan for vLLM 0.32.0 unless a test names another release: from 0.33 an H100/H200 enlarges
the block further (test_release_sizing.py).
"""

from __future__ import annotations

import json
import timeit
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner import (
    PlanError,
    plan_table,
)
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner import (
    kv_plan as _kv_plan,
)
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner.model import (
    FULL,
    LINEAR,
    SLIDING,
    parse_geometry,
)

DATA = Path(__file__).resolve().parents[4] / "data"
GIB = 1 << 30


def kv_plan(config: object, **opts: Any) -> dict[str, Any]:
    """kv_plan for vLLM 0.32.0 (the research notes' release) unless the test names one."""
    return _kv_plan(config, **{"vllm_version": "0.32.0", **opts})


def _cfg(name: str) -> dict[str, Any]:
    for folder in ("configs-hybrid", "configs"):
        path = DATA / folder / f"{name}.json"
        if path.exists():
            return dict(json.loads(path.read_text()))
    raise FileNotFoundError(name)


NEXT = "Qwen3-Next-80B-A3B-Instruct"


@pytest.mark.parametrize(("name", "full", "sliding", "linear", "window", "mtp"), [
    (NEXT, 12, 0, 36, None, 1),
    ("Qwen3.5-397B-A17B", 15, 0, 45, None, 1),
    ("Qwen3.5-122B-A10B", 12, 0, 36, None, 1),
    ("Qwen3.5-35B-A3B", 10, 0, 30, None, 1),
    ("Qwen3.5-27B", 16, 0, 48, None, 1),
    ("gpt-oss-120b", 18, 18, 0, 128, 0),
    ("openai__gpt-oss-120b", 18, 18, 0, 128, 0),  # no layer_types: gpt-oss alternation
    ("openai__gpt-oss-20b", 12, 12, 0, 128, 0),
    ("google__gemma-3-27b-it", 10, 52, 0, 1024, 0),  # nested text_config, pattern 6
    ("google__gemma-2-27b-it", 23, 23, 0, 4096, 0),
])
def test_layer_kinds(name: str, full: int, sliding: int, linear: int, window: int | None,
                     mtp: int) -> None:
    geo = parse_geometry(_cfg(name))
    assert (geo.count(FULL), geo.count(SLIDING), geo.count(LINEAR)) == (full, sliding, linear)
    assert geo.sliding_window == window
    assert geo.mtp_layers == mtp
    assert geo.is_hybrid


def test_gdn_layer_pattern_and_state_fields() -> None:
    geo = parse_geometry(_cfg("Qwen3.5-35B-A3B"))  # nested text_config, multimodal checkpoint
    assert [i for i, t in enumerate(geo.layer_types) if t == FULL] == list(range(3, 40, 4))
    assert geo.linear is not None and geo.linear.ssm_dtype == "float32"
    assert geo.layer_mix() == "10 attention + 30 linear"
    nxt = parse_geometry(_cfg(NEXT))
    assert nxt.linear is not None and nxt.linear.ssm_dtype is None
    assert nxt.linear.conv_dim() == 16 * 128 * 2 + 32 * 128


@pytest.mark.parametrize("name", ["Qwen__Qwen3-32B", "Qwen__Qwen2.5-72B-Instruct",
                                  "deepseek-ai__DeepSeek-V3",
                                  "mistralai__Mixtral-8x7B-Instruct-v0.1"])
def test_full_attention_geometries_stay_plain(name: str) -> None:
    # Qwen2.5 ships sliding_window 131072 with use_sliding_window off: still full attention.
    geo = parse_geometry(_cfg(name))
    assert geo.layer_types == () and not geo.is_hybrid and geo.kv_layers == geo.num_layers
    plan = kv_plan(_cfg(name), gpu="H200", tensor_parallel_size=8, max_model_len=8192,
                   refuse_hazards=False)
    assert plan["kv_cache_manager"] is None
    assert plan["block_size"] == 16
    assert plan["max_concurrency_at_max_model_len"] == round(
        plan["num_gpu_blocks"] / (8192 // 16), 4)
    assert "layers" not in plan_table(plan)


def _plan(name: str, tp: int, kv: str = "auto", gib: float = 40.0, **extra: Any
          ) -> dict[str, Any]:
    return kv_plan(_cfg(name), gpu="H200", tensor_parallel_size=tp, kv_cache_dtype=kv,
                   kv_cache_memory_bytes=int(gib * GIB), max_model_len=131072,
                   max_num_seqs=64, refuse_hazards=False, **extra)


@pytest.mark.parametrize(("name", "tp", "kv", "block"), [
    (NEXT, 1, "auto", 544), (NEXT, 2, "fp8", 1072), (NEXT, 4, "auto", 272),
    (NEXT, 8, "auto", 144), (NEXT, 8, "fp8", 272),
    ("Qwen3.5-397B-A17B", 4, "auto", 1056), ("Qwen3.5-397B-A17B", 8, "fp8", 1056),
    ("Qwen3.5-122B-A10B", 8, "auto", 528),
    ("Qwen3.5-35B-A3B", 1, "auto", 1056), ("Qwen3.5-35B-A3B", 1, "fp8", 2096),
    ("Qwen3.5-35B-A3B", 8, "auto", 272),
    ("Qwen3.5-27B", 1, "auto", 784), ("Qwen3.5-27B", 8, "auto", 400),
])
def test_attention_block_is_enlarged_to_the_state_page(name: str, tp: int, kv: str,
                                                       block: int) -> None:
    plan = _plan(name, tp, kv)
    assert plan["block_size"] == block
    assert plan["flags"]["block_size"] == 16  # the flag; the engine enlarges it itself
    assert any(f"to {block} tokens" in note for note in plan["notes"])


def test_mtp_widens_the_conv_state_and_adds_an_attention_layer() -> None:
    plain = _plan("Qwen3.5-27B", 1, "fp8")
    spec = _plan("Qwen3.5-27B", 1, "fp8",
                 speculative_config={"method": "mtp", "num_speculative_tokens": 2})
    assert spec["block_size"] == 1600  # notes: 27B fp8 TP1 k=2
    assert spec["kv_cache_manager"]["group_size"] == 17  # 16 + the MTP layer
    assert spec["kv_cache_manager"]["state_blocks_per_request"] == 2 + 2
    assert spec["max_concurrency_at_max_model_len"] < plain["max_concurrency_at_max_model_len"]
    assert "--speculative-config" in spec["argv"]
    value = spec["argv"][spec["argv"].index("--speculative-config") + 1]
    assert json.loads(value) == {"method": "mtp", "num_speculative_tokens": 2}


def test_speculative_config_from_extra_vars() -> None:
    from types import MappingProxyType  # a Mapping that is not a dict, as Ansible may pass
    text = _plan(NEXT, 2, speculative_config=MappingProxyType(
        {"method": "mtp", "num_speculative_tokens": "2"}))
    assert text["kv_cache_manager"]["state_blocks_per_request"] == 4


def test_prefix_caching_and_state_blocks() -> None:
    on = _plan(NEXT, 2)  # 0.32: prefix caching on by default -> align mode
    off = _plan(NEXT, 2, enable_prefix_caching=False)
    assert on["kv_cache_manager"]["mamba_cache_mode"] == "align"
    assert on["kv_cache_manager"]["state_blocks_per_request"] == 2
    assert off["kv_cache_manager"]["mamba_cache_mode"] == "none"
    assert off["kv_cache_manager"]["state_blocks_per_request"] == 1
    assert on["num_gpu_blocks"] == off["num_gpu_blocks"]
    old = _plan(NEXT, 2, vllm_version="0.25.0")  # off by default before 0.26
    assert old["kv_cache_manager"]["mamba_cache_mode"] == "none"


def test_ssm_dtype_follows_the_config_then_the_option() -> None:
    # Qwen3.5's fp32 state from 0.17 (config hook), bf16 before; Qwen3-Next via the option.
    assert _plan("Qwen3.5-27B", 1)["block_size"] == 784
    assert _plan("Qwen3.5-27B", 1, vllm_version="0.16.0")["block_size"] == 400
    # TP2 fp32 state: 24,576 conv + 1,048,576 ssm bytes over 1,024 B/token -> 1,056
    assert _plan(NEXT, 2, mamba_ssm_cache_dtype="float32")["block_size"] == 1056
    assert "--mamba-ssm-cache-dtype" in _plan(NEXT, 2, mamba_ssm_cache_dtype="float32")["argv"]


def test_issue_examples_against_the_old_arithmetic() -> None:
    # Qwen3-Next on 2xH200 at 262,144 tokens: the engine holds about 14 sequences.
    plan = kv_plan(_cfg(NEXT), gpu="H200", tensor_parallel_size=2, kv_cache_dtype="auto",
                   kv_cache_memory_bytes=40 * GIB, max_model_len=262144, refuse_hazards=False)
    assert 12 <= plan["max_concurrency_at_max_model_len"] <= 16
    assert plan["flags"]["max_num_seqs"] >= 10
    # Gemma-3-27B at 4,096 tokens: fewer than full-attention arithmetic promised (unsafe side).
    gemma = kv_plan(_cfg("google__gemma-3-27b-it"), gpu="H200", kv_cache_dtype="auto",
                    kv_cache_memory_bytes=60 * GIB, max_model_len=4096, refuse_hazards=False)
    full_attention = 60 * GIB // (62 * 2 * 16 * 128 * 2 * 16) / 256
    assert gemma["max_concurrency_at_max_model_len"] < 0.9 * full_attention
    assert gemma["kv_cache_manager"]["groups"] == ["1 x full_attention", "6 x sliding_attention"]


def test_disabling_the_hybrid_manager() -> None:
    hma = _plan("gpt-oss-120b", 2)
    flat = _plan("gpt-oss-120b", 2, disable_hybrid_kv_cache_manager=True)
    assert flat["kv_cache_manager"] is None  # one full-attention group: the old arithmetic
    assert "--disable-hybrid-kv-cache-manager" in flat["argv"]
    assert hma["max_concurrency_at_max_model_len"] > 1.7 * flat[
        "max_concurrency_at_max_model_len"]


@pytest.mark.parametrize(("name", "opts", "field"), [
    (NEXT, {"speculative_config": "mtp"}, "speculative_config"),
    (NEXT, {"speculative_config": {"method": "eagle", "num_speculative_tokens": 2}},
     "speculative_config.method"),
    (NEXT, {"speculative_config": {"method": "mtp", "num_speculative_tokens": 0}},
     "speculative_config.num_speculative_tokens"),
    (NEXT, {"speculative_config": {"method": "mtp", "num_speculative_tokens": 2, "x": 1}},
     "speculative_config.x"),
    ("Qwen__Qwen3-32B", {"speculative_config": {"method": "mtp", "num_speculative_tokens": 1}},
     "speculative_config.method"),
    (NEXT, {"mamba_ssm_cache_dtype": "fp8"}, "mamba_ssm_cache_dtype"),
    (NEXT, {"disable_hybrid_kv_cache_manager": True}, "disable_hybrid_kv_cache_manager"),
    (NEXT, {"disable_hybrid_kv_cache_manager": "yes"}, "disable_hybrid_kv_cache_manager"),
    (NEXT, {"enable_prefix_caching": "on"}, "enable_prefix_caching"),
    (NEXT, {"vllm_version": "0.10.1"}, "vllm_version"),
    ("openai__gpt-oss-20b", {"vllm_version": "0.10.1", "disable_hybrid_kv_cache_manager": True},
     "disable_hybrid_kv_cache_manager"),
])
def test_bad_options_name_the_option(name: str, opts: dict[str, Any], field: str) -> None:
    with pytest.raises(PlanError) as err:
        kv_plan(_cfg(name), gpu="H200", tensor_parallel_size=2, max_model_len=8192,
                refuse_hazards=False, **opts)
    assert err.value.field == field


def test_bad_layer_types_name_the_field() -> None:
    cfg = _cfg(NEXT)
    cfg["layer_types"] = ["full_attention", "mamba"] * 24
    with pytest.raises(PlanError) as err:
        parse_geometry(cfg)
    assert err.value.field == "config.layer_types"


def test_the_table_shows_the_layer_mix() -> None:
    text = plan_table(_plan(NEXT, 2))
    assert "12 attention + 36 linear" in text
    assert "1 x full_attention + 3 x linear_attention, 12 layers each" in text


def test_a_hybrid_plan_stays_fast() -> None:
    cfg = _cfg("Qwen3.5-397B-A17B")
    seconds = min(timeit.repeat(lambda: kv_plan(cfg, gpu="H200", tensor_parallel_size=8,
                                                refuse_hazards=False), number=20, repeat=3))
    assert seconds / 20 < 0.005
