"""What changed in the KV cache between vLLM 0.32, 0.33 and 0.34, planner side (issue 38).

The stored oracle verdicts (test_kv_oracle.py) prove the numbers against each release's own
code on H200; these tests pin the rules that select them: the default block size by release,
and the FlashInfer GDN prefill checkpoints by GPU architecture.
"""

from __future__ import annotations

import pytest
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner import (
    PlanError,
    kv_plan,
)
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner.releases import (
    RELEASES,
)
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner.versions import (
    parse_version,
    traits,
)
from test_planner_hybrid import _cfg

GIB = 1 << 30
BASE = {"tensor_parallel_size": 2, "kv_cache_memory_bytes": 20 * GIB, "max_model_len": 32768,
        "max_num_seqs": 64, "refuse_hazards": False}


@pytest.mark.parametrize(("release", "block"), [("0.32.0", 16), ("0.33.0", 16), ("0.34.0", 64)])
def test_the_block_size_left_open_is_the_release_default(release: str, block: int) -> None:
    plan = kv_plan(_cfg("Qwen__Qwen3-32B"), gpu="H200", vllm_version=release,
                   install_source="site", **BASE)
    assert plan["block_size"] == block
    assert plan["flags"]["block_size"] == block  # written on the argv: the plan is explicit


def test_a_given_block_size_is_kept_on_0_34() -> None:
    plan = kv_plan(_cfg("Qwen__Qwen3-32B"), gpu="H200", vllm_version="0.34.0", block_size=16,
                   install_source="site", **BASE)
    assert plan["block_size"] == 16


def _hybrid(gpu: object, release: str, **extra: object) -> dict[str, object]:
    return kv_plan(_cfg("Qwen3-Next-80B-A3B-Instruct"), gpu=gpu, vllm_version=release,
                   **{**BASE, **extra})


def test_gdn_prefill_checkpoints_reshape_the_cache_on_hopper_from_0_33() -> None:
    old = _hybrid("H200", "0.32.0")
    new = _hybrid("H200", "0.33.0")
    assert (old["block_size"], new["block_size"]) == (1072, 1088)  # fp8 KV; lcm with 64
    assert new["num_gpu_blocks"] < old["num_gpu_blocks"]
    # Without prefix caching ("none" mode) no checkpoints are exported: the block is 0.32's.
    assert _hybrid("H200", "0.33.0", enable_prefix_caching=False)["block_size"] == \
        _hybrid("H200", "0.32.0", enable_prefix_caching=False)["block_size"]


def test_no_gdn_checkpoints_where_vllm_picks_the_triton_kernel() -> None:
    """A100 (SM80) and L40S (SM89) run GDN prefill on Triton/FLA: 0.32's layout."""
    for gpu in ("A100-80GB", {"name": "custom", "memory_bytes": 80 * GIB,
                              "compute_capability": "8.0"}):
        assert _hybrid(gpu, "0.33.0")["block_size"] == _hybrid(gpu, "0.32.0")["block_size"]


def test_a_custom_gpu_defaults_to_hopper_and_names_a_bad_capability() -> None:
    hopper = _hybrid({"name": "custom", "memory_bytes": 140 * GIB}, "0.33.0")
    assert hopper["block_size"] == 576  # bf16 KV: a custom GPU has no fp8 unless it says so
    with pytest.raises(PlanError, match=r"gpu\.compute_capability.*nvidia-smi"):
        _hybrid({"name": "custom", "memory_bytes": 140 * GIB, "compute_capability": "nine"},
                "0.33.0")


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_the_sizing_traits_equal_what_each_wheel_says(release: str) -> None:
    """The planner's per-release sizing rules agree with the table read from the wheel
    (scripts/vllm-release.py): a new release that moves one of them fails here."""
    table = RELEASES[release]["sizing"]
    engine = traits(parse_version(release))
    assert engine.default_block_size == table["default_block_size"]
    assert engine.extensible_kv_default == table["extensible_kv_cache_default"]
