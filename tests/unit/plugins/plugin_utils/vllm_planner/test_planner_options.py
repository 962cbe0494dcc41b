"""vllm_planner.options: each invalid option fails naming its field and the fix; the parsed
options are frozen; the typed plan gives exactly kv_plan's dict."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from _models import QWEN25_72B, WORKLOAD
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner import (
    HazardError,
    PlanError,
    kv_plan,
)
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner.model import (
    load_config,
    parse_geometry,
)
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner.options import (
    OPTIONS,
    Driver,
    PlanOptions,
    Workload,
    check_names,
    parse_options,
)
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner.plan import (
    Hazard,
    Plan,
    build_plan,
)
from planner_golden import BASE, OPTION_ERRORS, SIZED, error_case

ROOT = Path(__file__).resolve().parents[5]
CASES = {name: (ref, opts, field) for name, ref, opts, field in OPTION_ERRORS}


def parse(config: object = None, **opts: Any) -> PlanOptions:
    raw = {**BASE, **opts}
    check_names(raw)
    return parse_options(raw, parse_geometry(load_config(config or dict(QWEN25_72B))))


def test_every_option_has_an_error_case() -> None:
    named = {field.split(".")[0] for _ref, _opts, field in CASES.values()}
    # model, host and port go to the argv as given: nothing to refuse.
    assert OPTIONS - {"model", "host", "port"} <= named


@pytest.mark.parametrize("name", sorted(CASES))
def test_an_invalid_option_names_its_field_and_the_fix(name: str) -> None:
    ref, opts, field = CASES[name]
    config, raw = error_case(ref, opts)
    with pytest.raises(PlanError) as caught:
        kv_plan(config, **raw)
    assert caught.value.field == field
    assert str(caught.value).startswith(f"kv_plan: {field}: ")
    assert caught.value.fix and f". Fix: {caught.value.fix}" in str(caught.value)


@pytest.mark.parametrize("name", sorted(set(CASES) - SIZED))
def test_the_options_module_is_where_it_is_refused(name: str) -> None:
    """The same error, from parse_options alone: nothing is sized before it is found."""
    ref, opts, field = CASES[name]
    config, raw = error_case(ref, opts)
    with pytest.raises(PlanError) as from_plan:
        kv_plan(config, **raw)
    with pytest.raises(PlanError) as from_options:
        check_names(raw)
        parse_options(raw, parse_geometry(load_config(config)))
    assert str(from_options.value) == str(from_plan.value)


@pytest.mark.parametrize("name", sorted(SIZED))
def test_a_planned_max_num_seqs_above_the_batch_is_refused_when_sized(name: str) -> None:
    ref, opts, _field = CASES[name]
    config, raw = error_case(ref, opts)
    if "max_num_seqs" in raw:  # both given: the options refuse it already
        with pytest.raises(PlanError, match="is below max_num_seqs"):
            parse(config, **opts)
    else:
        parse(config, **opts)  # the options alone are fine
        with pytest.raises(PlanError, match="16 is below max_num_seqs 1024"):
            kv_plan(config, **raw)


@pytest.mark.parametrize(("faults", "first"), [
    ({"tensor_parallel_size": 3, "gpu_memory_utilization": 2}, "tensor_parallel_size"),
    ({"workload": "x", "block_size": 24}, "block_size"),
    ({"driver": "580", "max_num_seqs": 0}, "max_num_seqs"),
    ({"engine_package": 5, "extra_flags": {"api-key": "x"}}, "extra_flags.api-key"),
    ({"gpu": "B300", "tensor_paralel_size": 1}, "tensor_paralel_size"),
])
def test_the_first_fault_in_kv_plan_order_is_reported(faults: dict[str, Any],
                                                      first: str) -> None:
    with pytest.raises(PlanError) as caught:
        kv_plan(dict(QWEN25_72B), **{**BASE, **faults})
    assert caught.value.field == first


def test_a_bad_config_is_reported_before_a_bad_option_but_after_an_unknown_one() -> None:
    with pytest.raises(PlanError) as caught:
        kv_plan([1], **{**BASE, "tensor_parallel_size": 0})
    assert caught.value.field == "config"
    with pytest.raises(PlanError) as caught:
        kv_plan([1], **{**BASE, "tensor_paralel_size": 0})
    assert caught.value.field == "tensor_paralel_size"


def full_options() -> PlanOptions:
    return parse(workload=WORKLOAD, hazard_overrides={"runtime_oom": "measured: 9 GiB free"},
                 extra_flags={"tool-call-parser": "hermes", "allowed-origins": ["a", "b"]},
                 driver={"source": "nvidia_repo", "version": "580.105.08"})


@pytest.mark.parametrize("attribute", ["tensor_parallel_size", "gpu", "workload", "driver",
                                       "max_num_seqs", "extra_flags"])
def test_options_are_frozen(attribute: str) -> None:
    options = full_options()
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(options, attribute, None)


def test_nested_options_are_frozen_too() -> None:
    options = full_options()
    assert isinstance(options.workload, Workload) and isinstance(options.driver, Driver)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.workload.concurrency = 1  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.driver.version = "1"  # type: ignore[misc]
    with pytest.raises(TypeError):
        options.hazard_overrides["preemption_storm"] = "a reason long enough"  # type: ignore[index]
    with pytest.raises(TypeError):
        options.extra_flags["seed"] = 1  # type: ignore[index]
    assert options.extra_flags["allowed-origins"] == ("a", "b")  # a tuple, not a list


def test_options_carry_typed_values() -> None:
    options = parse(gpu_memory_utilization="0.9", tensor_parallel_size="4",
                    driver={"cuda_compat": "true"})
    assert options.gpu_memory_utilization == 0.9 and options.gpu_memory_utilization_set
    assert options.tensor_parallel_size == 4
    assert options.driver == Driver("nvidia_repo", "", "", True,
                                    options.driver.resolved_version if options.driver else "")
    assert options.max_model_len == 32768 and not options.max_model_len_set
    assert parse(workload=WORKLOAD).max_model_len == 7200  # p95 6000 + 1200, block-aligned
    assert options.engine_package == "vllm" and options.gpu.name == "H200"


ROUND_TRIPS: list[tuple[str, object, dict[str, Any]]] = [
    ("72B with a workload", None, {"workload": WORKLOAD}),
    ("72B, everything set", None, {
        "workload": WORKLOAD, "max_model_len": 8192, "max_num_seqs": 32,
        "max_num_batched_tokens": 4096, "kv_cache_dtype": "auto", "dtype": "bfloat16",
        "enforce_eager": True, "enable_prefix_caching": False, "served_model_name": "q72",
        "host": "0.0.0.0", "port": 8001, "extra_flags": {"seed": 1, "allowed-origins": ["a"]},
        "driver": {"source": "nvidia_repo"}, "hazard_overrides": {
            "runtime_oom": "measured on 2026-11-02"}}),
    ("72B on old vLLM without chunked prefill", None,
     {"vllm_version": "0.6.2", "enable_chunked_prefill": False, "refuse_hazards": False}),
    ("Qwen3-Next (linear attention)", "tests/data/configs-hybrid/Qwen3-Next-80B-A3B-Instruct.json",
     {"tensor_parallel_size": 4, "kv_cache_dtype": "fp8"}),
    ("gemma-3 (sliding window)", "tests/data/configs/google__gemma-3-27b-it.json",
     {"refuse_hazards": False, "max_model_len": 8192}),
]


def typed(config: object, **opts: Any) -> Plan:
    raw = {**BASE, **opts}
    cfg = load_config(config or dict(QWEN25_72B))
    geo = parse_geometry(cfg)
    return build_plan(cfg, geo, parse_options(raw, geo))


@pytest.mark.parametrize("name", [name for name, _ref, _opts in ROUND_TRIPS])
def test_the_typed_plan_round_trips_to_the_dict(name: str) -> None:
    _name, ref, opts = next(row for row in ROUND_TRIPS if row[0] == name)
    config = (ROOT / ref).read_text() if isinstance(ref, str) else None
    plan = typed(config, **opts)
    expected = kv_plan(config or dict(QWEN25_72B), **{**BASE, **opts})
    assert json.dumps(plan.as_dict()) == json.dumps(expected)  # the keys' order too
    assert plan.ok == expected["ok"]
    assert list(plan.argv) == expected["argv"] and dict(plan.flags) == expected["flags"]


def test_a_refused_plan_carries_the_same_dict() -> None:
    opts = {"gpu_memory_utilization": 0.97}
    plan = typed(None, **opts)
    assert not plan.ok and [h.id for h in plan.hazards] == ["runtime_oom"]
    with pytest.raises(HazardError) as caught:
        kv_plan(dict(QWEN25_72B), **{**BASE, **opts})
    assert caught.value.plan == plan.as_dict()
    assert str(caught.value) == str(HazardError(plan.refusals(), plan.as_dict()))


def test_the_plan_dict_has_todays_keys_in_todays_order() -> None:
    assert list(typed(None).as_dict()) == [
        "model", "gpu", "vllm_version", "engine", "tensor_parallel_size", "dtype",
        "kv_cache_dtype", "kv_bytes_per_token", "weights_bytes", "weights_source",
        "weights_bytes_per_gpu", "activation_bytes_per_gpu", "non_torch_bytes_per_gpu",
        "reserved_bytes_per_gpu", "budget_bytes_per_gpu", "outside_budget_bytes_per_gpu",
        "kv_pool_bytes_per_gpu", "block_size", "num_gpu_blocks",
        "max_concurrency_at_max_model_len", "concurrency_at_p95", "layer_mix",
        "kv_cache_manager", "kv_pool_tokens", "kv_cache_sizing", "max_model_len", "max_concurrency",
        "concurrency_seq_len", "flags", "decided", "argv", "engine_stack", "hazards", "ok",
        "notes"]


def test_plans_and_hazards_are_frozen() -> None:
    plan = typed(None, hazard_overrides={"runtime_oom": "measured on 2026-11-02"},
                 gpu_memory_utilization=0.97)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.model = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        plan.flags["max_num_seqs"] = 1  # type: ignore[index]
    assert plan.hazards == (Hazard("runtime_oom", plan.hazards[0].message,
                                   "measured on 2026-11-02"),)
    assert plan.hazards[0].as_dict() == {"id": "runtime_oom", "message": plan.hazards[0].message,
                                         "overridden": True, "reason": "measured on 2026-11-02"}
