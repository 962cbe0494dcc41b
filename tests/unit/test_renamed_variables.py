"""The names renamed before 1.0.0 have no aliases: an old vllm_server_pip_* name is refused
by the role's unknown-variable check, which suggests its vllm_install_uv_* replacement (the
install variables moved to role vllm_install: vllm_server_uv_*, _version, _root, ... are
refused naming their vllm_install_* replacement), and no old name remains in the roles'
defaults or argument specs. Also the one "no GPU" fact that
nvidia_driver and cuda_toolkit both default to."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from _scripts import ansible_env
from ansible_collections.vllm_fleet.serving.plugins.filter.role_vars import unknown_role_vars

ROOT = Path(__file__).resolve().parents[2]

PLAYBOOK = str(Path(sys.executable).parent / "ansible-playbook")

# The install's variables, moved from vllm_server to vllm_install (same suffix).
MOVED = ("package", "version", "python", "system_packages", "root", "user", "group",
         "uv_version", "uv_constraints", "uv_find_links", "uv_index_url", "uv_extra_args",
         "uv_timeout", "uv_remove", "prebuilt_kernels", "prebuilt_kernels_index_urls")

# (old name, its role, the name that replaced it)
REMOVED: list[tuple[str, str, str]] = [
    *[(f"vllm_server_pip_{s}", "vllm_server", f"vllm_install_uv_{s}")
      for s in ("constraints", "find_links", "index_url", "extra_args", "timeout", "remove")],
    *[(f"vllm_server_{s}", "vllm_server", f"vllm_install_{s}") for s in MOVED],
    ("vllm_server_install_background", "vllm_server", "(none: dropped)"),
    ("benchmark_gate", "benchmark", "benchmark_gate_thresholds"),
    ("benchmark_enforce_gate", "benchmark", "benchmark_gate_fails_play"),
    ("prometheus_server_vllm_version", "prometheus_server", "vllm_install_version"),
    ("prometheus_server_engine_metrics_port", "prometheus_server", "engine_gateway_metrics_port"),
    ("prometheus_server_node_exporter_port", "prometheus_server",
     "gpu_metrics_node_exporter_port"),
    ("prometheus_server_dcgm_exporter_port", "prometheus_server",
     "gpu_metrics_dcgm_exporter_port"),
]
ROLES = ("nvidia_driver", "cuda_toolkit")


@pytest.mark.parametrize(("old", "role", "new"), REMOVED, ids=[r[0] for r in REMOVED])
def test_old_names_are_gone_from_defaults_and_specs(old: str, role: str, new: str) -> None:
    defaults = yaml.safe_load((ROOT / "roles" / role / "defaults/main.yml").read_text())
    specs = yaml.safe_load((ROOT / "roles" / role / "meta/argument_specs.yml").read_text())
    assert old not in defaults
    assert old not in specs["argument_specs"]["main"]["options"]


@pytest.mark.parametrize("suffix", ["constraints", "find_links", "index_url", "extra_args",
                                    "timeout", "remove"])
def test_an_old_pip_name_is_refused_with_its_replacement(suffix: str) -> None:
    role = str(ROOT / "roles" / "vllm_install")
    (message,) = unknown_role_vars([f"vllm_install_pip_{suffix}", f"vllm_install_uv_{suffix}"],
                                   role)
    assert message.startswith(f"vllm_install_pip_{suffix}: unknown to role vllm_install (did "
                              f"you mean vllm_install_uv_{suffix}"), message


@pytest.mark.parametrize("suffix", MOVED)
def test_a_moved_vllm_server_name_is_refused_naming_its_vllm_install_replacement(
        suffix: str) -> None:
    role = str(ROOT / "roles" / "vllm_server")
    (message,) = unknown_role_vars([f"vllm_server_{suffix}", "vllm_server_api_key"], role)
    assert message == (f"vllm_server_{suffix}: unknown to role vllm_server (moved to role "
                       f"vllm_install: vllm_install_{suffix})"), message


def test_site_yml_reads_only_the_new_gate_switch() -> None:
    text = (ROOT / "playbooks/site.yml").read_text()
    assert "site_benchmark_gate" not in text and "site_run_benchmark_gate" in text


def run(tmp: Path, hosts: dict[str, dict[str, Any]]) -> tuple[dict[str, dict[str, Any]], str]:
    """Each host (its variables over every role's defaults) reports the internal names, the
    site gate's condition and both *_without_gpu; returns them and the run's output."""
    defaults: dict[str, Any] = {}
    for role in ROLES:
        defaults.update(yaml.safe_load((ROOT / "roles" / role / "defaults/main.yml").read_text()))
    inventory = {"all": {"vars": {**defaults, "ansible_connection": "local",
                                  "ansible_python_interpreter": sys.executable},
                         "hosts": hosts}}
    report: dict[str, str] = {}
    report["nvidia_driver_without_gpu"] = "{{ nvidia_driver_without_gpu }}"
    report["cuda_toolkit_without_gpu"] = "{{ cuda_toolkit_without_gpu }}"
    play = [{
        "name": "Read the renamed variables", "hosts": "all", "gather_facts": False,
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
def no_gpu(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    hosts: dict[str, dict[str, Any]] = {
        "no-gpu": {"vllm_fleet_without_gpu": "skip"},
        "no-gpu-driver-overridden": {"vllm_fleet_without_gpu": "skip",
                                     "nvidia_driver_without_gpu": "install"},
        "unset": {}}
    values, output = run(tmp_path_factory.mktemp("no-gpu"), hosts)
    assert "deprecated" not in output
    return values


def test_one_no_gpu_fact_for_driver_and_cuda(no_gpu: dict[str, dict[str, Any]]) -> None:
    values = no_gpu
    assert values["no-gpu"]["nvidia_driver_without_gpu"] == "skip"
    assert values["no-gpu"]["cuda_toolkit_without_gpu"] == "skip"
    # Each role's own input still wins for that role alone.
    assert values["no-gpu-driver-overridden"]["nvidia_driver_without_gpu"] == "install"
    assert values["no-gpu-driver-overridden"]["cuda_toolkit_without_gpu"] == "skip"
    assert values["unset"]["nvidia_driver_without_gpu"] == "fail"
    assert values["unset"]["cuda_toolkit_without_gpu"] == "fail"
