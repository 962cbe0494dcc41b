"""Issue 22, item 2: DCGM has one owner, the nvidia_driver role (datacenter-gpu-manager-4-cuda13
or -cuda12, at its driver's CUDA major); gpu_metrics installs only the exporter on top and,
where DCGM is missing, stops with the fix instead of installing a second copy."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from _scripts import ansible_env

ROOT = Path(__file__).resolve().parents[2]


def test_only_nvidia_driver_installs_dcgm() -> None:
    defaults = yaml.safe_load((ROOT / "roles/gpu_metrics/defaults/main.yml").read_text())
    assert defaults["gpu_metrics_dcgm_packages"] == ["datacenter-gpu-manager-exporter"]
    # No other role lists a DCGM package (defaults, vars) to install.
    for path in sorted([*ROOT.glob("roles/*/defaults/main.yml"),
                        *ROOT.glob("roles/*/vars/main.yml")]):
        if path.parts[-3] == "nvidia_driver":
            continue
        for value in (yaml.safe_load(path.read_text()) or {}).values():
            if isinstance(value, list):
                assert not [v for v in value
                            if str(v).startswith("datacenter-gpu-manager-4")], path


def run_check(tmp: Path, dpkg_answer: str | None) -> subprocess.CompletedProcess[str]:
    """gpu_metrics' DCGM check on localhost, with a dpkg-query that knows DCGM_ANSWER's
    package (None: no DCGM package at all)."""
    fake = tmp / "bin"
    fake.mkdir()
    script = fake / "dpkg-query"
    script.write_text("#!/bin/sh\n" + (
        f"printf 'ii  %s\\n' '{dpkg_answer}'\n" if dpkg_answer
        else "echo \"dpkg-query: no packages found matching $4\" >&2\nexit 1\n"))
    script.chmod(0o755)
    playbook = [{"hosts": "localhost", "connection": "local", "gather_facts": False,
                 "vars": {"ansible_python_interpreter": sys.executable,
                          "gpu_metrics_dcgm_exporter": True},
                 "tasks": [{"ansible.builtin.include_role": {"name": "gpu_metrics",
                                                             "tasks_from": "dcgm"}}]}]
    (tmp / "check.yml").write_text(yaml.safe_dump(playbook))
    env = ansible_env(PATH=f"{fake}:{os.environ['PATH']}")
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,",
         str(tmp / "check.yml")], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=300, check=False)


@pytest.mark.parametrize("package", ["datacenter-gpu-manager-4-cuda13",
                                     "datacenter-gpu-manager-4-cuda12"])
def test_the_exporter_goes_on_top_of_the_drivers_dcgm(tmp_path: Path, package: str) -> None:
    result = run_check(tmp_path, package)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_missing_dcgm_stops_with_the_fix(tmp_path: Path) -> None:
    result = run_check(tmp_path, None)
    out = " ".join((result.stdout + result.stderr).split())
    assert result.returncode != 0
    assert "gpu_metrics_dcgm_exporter is true but DCGM" in out
    assert "nvidia_driver_dcgm: true" in out and "gpu_metrics_dcgm_exporter: false" in out
