"""plugins/action/managed_service.py with the real ansible-playbook on this machine
(connection local) and a stand-in systemctl first on PATH: an enabled, active unit is
answered "unchanged" from one shell command with no module call; any other state goes to
ansible.builtin.systemd_service; arguments it does not take are refused with the fix."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from _scripts import counted_project, run_counted
from test_plan_playbook import PLAYBOOK

ROOT = Path(__file__).resolve().parents[4]
from ansible_collections.vllm_fleet.serving.plugins.action.managed_service import (  # noqa: E402
    already_running,
    check_args,
    probe_command,
)

PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Enable and start the unit
      managed_service:
        name: demo-unit.service
        enabled: true
        state: "{{ wanted_state | default('started') }}"
"""


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    counted_project(tmp_path, PLAY)
    return tmp_path


def fake_systemctl(project: Path, enabled: str, active: str) -> None:
    """A systemctl that answers is-enabled and is-active (and logs every call)."""
    script = project / "bin" / "systemctl"
    script.write_text(
        f"#!/bin/sh\necho \"$*\" >> {project}/systemctl.log\n"
        f"case \"$1\" in is-enabled) echo {enabled};; is-active) echo {active};; "
        "*) exit 1;; esac\n")
    script.chmod(0o755)


def play(project: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], int, dict[str, Any]]:
    return run_counted(project, PLAYBOOK, *args)


def test_an_enabled_active_unit_is_unchanged_without_a_module(project: Path) -> None:
    fake_systemctl(project, "enabled", "active")
    proc, calls, report = play(project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = report["plays"][0]["tasks"][0]["hosts"]["localhost"]
    assert not result["changed"] and result["state"] == "started" and calls == 0
    log = (project / "systemctl.log").read_text().splitlines()
    assert log == ["is-enabled -- demo-unit.service", "is-active -- demo-unit.service"]


@pytest.mark.parametrize("enabled, active", [
    ("disabled", "active"), ("enabled", "inactive"), ("static", "active"),
    ("enabled", "activating"), ("masked", "failed")])
def test_any_other_state_goes_to_the_builtin(project: Path, enabled: str, active: str) -> None:
    fake_systemctl(project, enabled, active)
    _proc, calls, _report = play(project)
    assert calls == 1  # ansible.builtin.systemd_service ran (and met the stand-in systemctl)


def test_another_state_is_refused_with_the_fix(project: Path) -> None:
    fake_systemctl(project, "enabled", "active")
    proc, calls, _report = play(project, "-e", "wanted_state=stopped")
    assert proc.returncode != 0 and calls == 0
    assert "use ansible.builtin.systemd_service for any other state" in proc.stdout


def test_argument_checks_and_probe() -> None:
    good = {"name": "haproxy", "enabled": True, "state": "started"}
    assert check_args(good) is None
    assert check_args({**good, "no_block": True}) is None
    extra = check_args({**good, "daemon_reload": True}) or ""
    assert "unsupported option(s) daemon_reload" in extra
    assert "not a systemd unit name" in (check_args({**good, "name": "a b; reboot"}) or "")
    disabled = check_args({**good, "enabled": False}) or ""
    assert "enabled: true and state: started only" in disabled
    assert probe_command("it's") == ("LC_ALL=C systemctl is-enabled -- 'it'\"'\"'s'; "
                                     "LC_ALL=C systemctl is-active -- 'it'\"'\"'s'")
    assert already_running("enabled\nactive\n")
    assert not already_running("enabled\n")
    assert not already_running("enabled-runtime\nactive\n")
