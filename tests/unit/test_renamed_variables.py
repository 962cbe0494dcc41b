"""Renamed public variables keep working for one release, through real Ansible: an old name
the inventory sets wins over its new name's default and prints a deprecation warning naming
both (and the release that removes it); unset, the new name's value is used and nothing is
said. Also the one "no GPU" fact that nvidia_driver and cuda_toolkit both default to."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from _scripts import ansible_env

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "filter_plugins"))

from deprecation import REMOVED_IN, deprecation_message  # noqa: E402

PLAYBOOK = str(Path(sys.executable).parent / "ansible-playbook")

# (old name, new name, the role's internal name that every task reads, a value to set)
RENAMES: list[tuple[str, str, str, Any]] = [
    ("vllm_server_pip_constraints", "vllm_server_uv_constraints",
     "_vllm_server_uv_constraints", ["torch==2.9.0"]),
    ("vllm_server_pip_find_links", "vllm_server_uv_find_links",
     "_vllm_server_uv_find_links", "/srv/wheelhouse"),
    ("vllm_server_pip_index_url", "vllm_server_uv_index_url",
     "_vllm_server_uv_index_url", "https://pypi.internal/simple"),
    ("vllm_server_pip_extra_args", "vllm_server_uv_extra_args",
     "_vllm_server_uv_extra_args", "--no-index"),
    ("vllm_server_pip_timeout", "vllm_server_uv_timeout", "_vllm_server_uv_timeout", 600),
    ("vllm_server_pip_remove", "vllm_server_uv_remove", "_vllm_server_uv_remove", ["torchvision"]),
    ("benchmark_gate", "benchmark_gate_thresholds", "_benchmark_gate_thresholds",
     {"p50_ttft_ms": 3000, "max_preemptions": 0, "max_failed": 0}),
    ("benchmark_enforce_gate", "benchmark_gate_fails_play", "_benchmark_gate_fails_play", False),
]
ROLES = ("vllm_server", "benchmark", "nvidia_driver", "cuda_toolkit")


def site_gate_condition() -> str:
    """The condition site.yml runs the benchmark gate under (read from the playbook)."""
    for play in yaml.safe_load((ROOT / "playbooks/site.yml").read_text()):
        for task in play.get("tasks", []):
            if (task.get("ansible.builtin.import_role") or {}).get("name") == "benchmark":
                return " ".join(str(task["when"]).split())
    raise AssertionError("site.yml imports no benchmark role")


def run(tmp: Path, hosts: dict[str, dict[str, Any]]) -> tuple[dict[str, dict[str, Any]], str]:
    """Each host (its variables over every role's defaults) reports the internal names, the
    site gate's condition and both *_without_gpu; returns them and the run's output."""
    defaults: dict[str, Any] = {}
    for role in ROLES:
        defaults.update(yaml.safe_load((ROOT / "roles" / role / "defaults/main.yml").read_text()))
    inventory = {"all": {"vars": {**defaults, "ansible_connection": "local",
                                  "ansible_python_interpreter": sys.executable},
                         "hosts": hosts}}
    report = {internal: "{{ " + internal + " }}" for _old, _new, internal, _value in RENAMES}
    report["site_gate"] = "{{ " + site_gate_condition() + " }}"
    report["nvidia_driver_without_gpu"] = "{{ nvidia_driver_without_gpu }}"
    report["cuda_toolkit_without_gpu"] = "{{ cuda_toolkit_without_gpu }}"
    play = [{
        "name": "Read the renamed variables", "hosts": "all", "gather_facts": False,
        "vars_files": [str(ROOT / "roles/vllm_server/vars/main.yml"),
                       str(ROOT / "roles/benchmark/vars/main.yml")],
        "tasks": [{"name": "Write what the roles read", "ansible.builtin.copy": {
            "dest": str(tmp / "{{ inventory_hostname }}.json"), "mode": "0644",
            "content": "{{ _report | to_json }}"}, "vars": {"_report": report}}]}]
    (tmp / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    (tmp / "hosts.yml").write_text(yaml.safe_dump(inventory))
    result = subprocess.run([PLAYBOOK, "-i", str(tmp / "hosts.yml"), str(tmp / "play.yml")],
                            cwd=ROOT, env=ansible_env(ANSIBLE_DEPRECATION_WARNINGS="1"),
                            capture_output=True, text=True, timeout=300, check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    return ({host: json.loads((tmp / f"{host}.json").read_text()) for host in hosts},
            " ".join(output.split()))


@pytest.fixture(scope="module")
def old_names(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, dict[str, Any]], str]:
    """One host per old name set (the new name left at its default), and the old site gate."""
    hosts: dict[str, dict[str, Any]] = {old: {old: value}
                                        for old, _new, _internal, value in RENAMES}
    hosts["site_benchmark_gate"] = {"site_benchmark_gate": True}
    hosts["no-gpu"] = {"vllm_fleet_without_gpu": "skip"}
    hosts["no-gpu-driver-overridden"] = {"vllm_fleet_without_gpu": "skip",
                                         "nvidia_driver_without_gpu": "install"}
    return run(tmp_path_factory.mktemp("old"), hosts)


@pytest.fixture(scope="module")
def new_names(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, dict[str, Any]], str]:
    """Only new names: one host with every one set, one with none."""
    hosts: dict[str, dict[str, Any]] = {
        "set": {new: value for _old, new, _internal, value in RENAMES}
        | {"site_run_benchmark_gate": True},
        "unset": {}}
    return run(tmp_path_factory.mktemp("new"), hosts)


@pytest.mark.parametrize(("old", "new", "internal", "value"), RENAMES,
                         ids=[r[0] for r in RENAMES])
def test_an_old_name_set_wins_with_a_warning_naming_both(
        old_names: tuple[dict[str, dict[str, Any]], str],
        old: str, new: str, internal: str, value: Any) -> None:
    values, output = old_names
    assert values[old][internal] == value
    assert deprecation_message(old, new) in output
    assert f"{old} is deprecated and will be removed in {REMOVED_IN}" in output


def test_the_old_site_gate_switch_still_runs_the_gate(
        old_names: tuple[dict[str, dict[str, Any]], str]) -> None:
    values, output = old_names
    assert values["site_benchmark_gate"]["site_gate"] is True
    assert deprecation_message("site_benchmark_gate", "site_run_benchmark_gate") in output
    # A host that sets neither name does not run the gate.
    assert values["no-gpu"]["site_gate"] is False


@pytest.mark.parametrize(("old", "new", "internal", "value"), RENAMES,
                         ids=[r[1] for r in RENAMES])
def test_the_new_names_are_read_without_a_warning(
        new_names: tuple[dict[str, dict[str, Any]], str],
        old: str, new: str, internal: str, value: Any) -> None:
    values, output = new_names
    assert values["set"][internal] == value
    defaults = {}
    for role in ROLES:
        defaults.update(yaml.safe_load((ROOT / "roles" / role / "defaults/main.yml").read_text()))
    assert values["unset"][internal] == defaults[new]
    assert "deprecated" not in output
    assert values["set"]["site_gate"] is True and values["unset"]["site_gate"] is False


def test_one_no_gpu_fact_for_driver_and_cuda(
        old_names: tuple[dict[str, dict[str, Any]], str],
        new_names: tuple[dict[str, dict[str, Any]], str]) -> None:
    values, _output = old_names
    assert values["no-gpu"]["nvidia_driver_without_gpu"] == "skip"
    assert values["no-gpu"]["cuda_toolkit_without_gpu"] == "skip"
    # Each role's own input still wins for that role alone.
    assert values["no-gpu-driver-overridden"]["nvidia_driver_without_gpu"] == "install"
    assert values["no-gpu-driver-overridden"]["cuda_toolkit_without_gpu"] == "skip"
    unset, _output = new_names
    assert unset["unset"]["nvidia_driver_without_gpu"] == "fail"
    assert unset["unset"]["cuda_toolkit_without_gpu"] == "fail"
