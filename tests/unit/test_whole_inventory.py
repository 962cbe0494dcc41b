"""Issue 23, item 5: playbooks that read the whole inventory refuse a partial one (an AWX job
slice) where the inventory declares the fleet's size (vllm_fleet_expected_hosts). AWX passes
no variable that names a slice, so nothing else can tell a slice from the whole fleet."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from _scripts import ansible_env
from test_plan_playbook import PLAYBOOK
from test_site_playbook import two_host_inventory

ROOT = Path(__file__).resolve().parents[2]
REFUSED = "This playbook needs the whole inventory: group vllm_servers has 2 hosts here"


def run(playbook: str, inventory: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PLAYBOOK, "-i", str(inventory), str(ROOT / "playbooks" / playbook),
                           *extra], cwd=ROOT, env=ansible_env(), capture_output=True, text=True,
                          timeout=300, check=False)


@pytest.mark.parametrize("playbook", ["site.yml", "rebuild.yml", "rolling_restart.yml"])
def test_a_slice_of_the_declared_fleet_is_refused_before_any_host(
        tmp_path: Path, playbook: str) -> None:
    result = run(playbook, two_host_inventory(tmp_path), "-e", "vllm_fleet_expected_hosts=3")
    out = " ".join((result.stdout + result.stderr).split())
    assert result.returncode != 0
    assert f"{REFUSED}, vllm_fleet_expected_hosts says 3." in out
    assert "Fix: set the job template's Job Slicing to 1" in out
    assert "UNREACHABLE" not in out and "the plan is refused" not in out


def test_the_whole_declared_fleet_and_an_unset_size_pass(tmp_path: Path) -> None:
    inventory = two_host_inventory(tmp_path)
    for extra in (["-e", "vllm_fleet_expected_hosts=2"], []):
        result = run("site.yml", inventory, *extra)
        out = " ".join((result.stdout + result.stderr).split())
        # Past the guard: the plan ran (and refused gpu-bad's unsafe flags, as it should).
        assert REFUSED not in out
        assert "gpu-bad.invalid vllm-0: the plan is refused" in out


def test_a_limit_keeps_the_whole_inventory(tmp_path: Path) -> None:
    result = run("site.yml", two_host_inventory(tmp_path), "-e", "vllm_fleet_expected_hosts=2",
                 "--limit", "gpu-bad.invalid")
    out = " ".join((result.stdout + result.stderr).split())
    assert REFUSED not in out and "gpu-bad.invalid vllm-0: the plan is refused" in out


def test_a_size_that_is_no_number_is_named(tmp_path: Path) -> None:
    result = run("site.yml", two_host_inventory(tmp_path), "-e", "vllm_fleet_expected_hosts=two")
    out = " ".join((result.stdout + result.stderr).split())
    assert result.returncode != 0
    assert 'vllm_fleet_expected_hosts is "two": not a number of hosts' in out
