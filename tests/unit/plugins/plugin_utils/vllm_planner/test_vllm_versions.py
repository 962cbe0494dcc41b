"""vLLM versions as the planner reads them (PEP 440, via `packaging`): final releases, the
four-part 0.10.1.1 and .postN re-packs are accepted; pre-releases, development and local
builds and epochs are refused with the field and the fix named, by every entry point."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from _models import QWEN25_72B
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner import (
    PlanError,
    kv_plan,
    parse_version,
)
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner import (
    stack_table as table,
)
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner.stack import (
    engine_stack,
)
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner.versions import traits

GOOD: dict[str, Any] = {"gpu": "H200", "tensor_parallel_size": 2}


@pytest.mark.parametrize(("text", "version"), [
    ("0.32.0", (0, 32, 0)),
    ("v0.32.0", (0, 32, 0)),
    (" 0.32.0 ", (0, 32, 0)),
    ("0.32", (0, 32, 0)),
    ("0.10.1.1", (0, 10, 1, 1)),
    ("0.6.1.post2", (0, 6, 1)),
    ("V0.6.2.POST1", (0, 6, 2)),
    ("0.5.0", (0, 5, 0)),
])
def test_final_releases_are_accepted(text: str, version: tuple[int, ...]) -> None:
    assert parse_version(text) == version


def test_four_part_release_orders_between_its_neighbours() -> None:
    assert parse_version("0.10.1") < parse_version("0.10.1.1") < parse_version("0.10.2")
    assert traits(parse_version("0.10.1.1")).label == "0.10.1.1"


def test_every_release_in_the_stack_table_is_accepted() -> None:
    for release, *_rest in table.VLLM_STACK:
        parse_version(release)  # raises for a row the planner would refuse
        assert engine_stack(release).vllm == release


@pytest.mark.parametrize(("text", "kind", "final"), [
    ("0.11.0rc1", "a pre-release", "0.11.0"),
    ("0.11.0-rc.1", "a pre-release", "0.11.0"),
    ("0.12.0a2", "a pre-release", "0.12.0"),
    ("0.12.0b1", "a pre-release", "0.12.0"),
    ("0.33.0.dev12", "a development build", "0.33.0"),
    ("0.11.0rc1.dev3", "a development build", "0.11.0"),
    ("0.6.1.post1.dev3", "a development build", "0.6.1.post1"),
    ("0.32.0+cu130", "a local build", "0.32.0"),
    ("0.10.1.1+cu126", "a local build", "0.10.1.1"),
])
def test_non_final_builds_are_refused_with_the_fix(text: str, kind: str, final: str) -> None:
    with pytest.raises(PlanError) as err:
        parse_version(text)
    assert err.value.field == "vllm_version"
    assert str(err.value) == (
        f"kv_plan: vllm_version: {text} is {kind}; the planner knows final vLLM releases only. "
        f"Fix: pin a final release such as {final} (the stack table and flag history are "
        "checked against releases on PyPI)")


@pytest.mark.parametrize("value", ["latest", "", "0.x", "1!0.6.0", None, 0.6, ["0.6.0"]])
def test_non_versions_are_refused(value: object) -> None:
    with pytest.raises(PlanError) as err:
        parse_version(value, "vllm_install_version")
    assert err.value.field == "vllm_install_version"
    assert "release" in err.value.fix


def test_a_yaml_number_is_told_to_quote() -> None:
    with pytest.raises(PlanError, match="in quotes"):
        parse_version(0.6)


def test_too_old_is_refused() -> None:
    with pytest.raises(PlanError, match="older than the oldest supported release 0.5.0"):
        parse_version("0.4.3")


def test_kv_plan_plans_0_10_1_1_and_refuses_an_rc() -> None:
    plan = kv_plan(QWEN25_72B, **GOOD, vllm_version="0.10.1.1")
    assert plan["vllm_version"] == "0.10.1.1"
    with pytest.raises(PlanError, match=r"vllm_version: 0.11.0rc1 is a pre-release.*Fix: pin "
                                        r"a final release such as 0.11.0"):
        kv_plan(QWEN25_72B, **GOOD, vllm_version="0.11.0rc1")


def test_engine_stack_refuses_a_dev_build() -> None:
    with pytest.raises(PlanError, match="0.33.0.dev12 is a development build"):
        engine_stack("0.33.0.dev12")


def test_without_packaging_the_planner_imports_and_names_the_fix() -> None:
    """ansible-test's import check loads plugins without packaging (ansible-core's own
    dependency): the planner imports there, and a version read says what is missing."""
    code = (
        "import sys; sys.modules['packaging'] = None\n"
        "from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner import (\n"
        "    PlanError, parse_version)\n"
        "try:\n"
        "    parse_version('0.32.0')\n"
        "except PlanError as error:\n"
        "    print(error)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert "vllm_version: the planner reads versions with the Python package 'packaging'" in (
        done.stdout)
    assert "Fix: install ansible-core with its dependencies" in done.stdout
