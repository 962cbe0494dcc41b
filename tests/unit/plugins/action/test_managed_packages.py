"""plugins/action/managed_packages.py with the real ansible-playbook on this machine
(connection local) and a stand-in dpkg-query first on PATH: packages that are all `ii` are
answered "unchanged" from one shell command with no module call; any other answer goes to
ansible.builtin.apt (run in check mode here, with a stand-in apt-get too, so nothing is ever
installed on this machine); arguments it does not take are refused with the fix."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from _scripts import counted_project, run_counted
from test_plan_playbook import PLAYBOOK

ROOT = Path(__file__).resolve().parents[4]
from ansible_collections.vllm_fleet.serving.plugins.action.managed_packages import (  # noqa: E402
    all_installed,
    check_args,
    module_args,
    probe_command,
    probe_judges,
)

PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Install the packages
      managed_packages:
        name: "{{ wanted | default(['demo-one', 'demo-two']) }}"
        state: "{{ wanted_state | default('present') }}"
        install_recommends: false
        update_cache: true
        cache_valid_time: 3600
"""


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    counted_project(tmp_path, PLAY)
    # apt must never change this machine: any apt-get the builtin would run only logs.
    for tool in ("apt-get", "apt-cache", "aptitude", "apt-mark"):
        stub = tmp_path / "bin" / tool
        stub.write_text(f"#!/bin/sh\necho \"{tool} $*\" >> {tmp_path}/apt.log\nexit 1\n")
        stub.chmod(0o755)
    return tmp_path


def fake_dpkg_query(project: Path, answer: str, rc: int = 0) -> None:
    """A dpkg-query that prints ANSWER and exits RC (and logs its arguments)."""
    script = project / "bin" / "dpkg-query"
    script.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$*\" >> {project}/dpkg.log\n"
                      f"printf '{answer}'\nexit {rc}\n")
    script.chmod(0o755)


def play(project: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], int, dict[str, Any]]:
    return run_counted(project, PLAYBOOK, *args)


@pytest.mark.parametrize("mode", [[], ["--check", "--diff"]])
def test_installed_packages_are_unchanged_without_a_module(project: Path, mode: list[str]) -> None:
    fake_dpkg_query(project, "ii  demo-one\\nii  demo-two\\n")
    proc, calls, report = play(project, *mode)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = report["plays"][0]["tasks"][0]["hosts"]["localhost"]
    assert not result["changed"] and result["packages"] == ["demo-one", "demo-two"]
    assert calls == 0
    log = (project / "dpkg.log").read_text().splitlines()
    assert log == ["--show --showformat=${db:Status-Abbrev} ${Package}\\n -- demo-one demo-two"]


@pytest.mark.parametrize("answer, rc", [
    ("ii  demo-one\\n", 1),                       # demo-two unknown to dpkg
    ("ii  demo-one\\nrc  demo-two\\n", 0),        # removed, configuration kept
    ("ii  demo-one\\niF  demo-two\\n", 0),        # half-configured
    ("ii  demo-one\\nun  demo-two\\n", 0),        # known, not installed
    ("ii  demo-one\\n", 0),                       # one package missing from the answer
    ("", 0),                                      # nothing at all
    ("Desired=Unknown/Install\\n", 0),            # not the asked format
])
def test_anything_else_goes_to_the_builtin(project: Path, answer: str, rc: int) -> None:
    fake_dpkg_query(project, answer, rc)
    _proc, calls, report = play(project, "--check")
    assert calls >= 1  # ansible.builtin.apt ran (in check mode, met the stand-ins)
    result = report["plays"][0]["tasks"][0]["hosts"]["localhost"]
    assert "packages" not in result


def test_a_version_pin_skips_the_probe(project: Path) -> None:
    fake_dpkg_query(project, "ii  demo-one\\n")
    _proc, calls, _report = play(project, "--check", "-e", '{"wanted": ["demo-one=1.2*"]}')
    assert calls >= 1 and not (project / "dpkg.log").exists()


def test_another_state_is_refused_with_the_fix(project: Path) -> None:
    fake_dpkg_query(project, "ii  demo-one\\nii  demo-two\\n")
    proc, calls, _report = play(project, "-e", "wanted_state=absent")
    assert proc.returncode != 0 and calls == 0
    assert "takes state: present only. Fix: use ansible.builtin.apt" in proc.stdout


def test_argument_checks() -> None:
    good = {"name": ["haproxy"], "state": "present", "install_recommends": False,
            "update_cache": True, "cache_valid_time": 3600}
    assert check_args(good) is None
    assert check_args({"name": "haproxy"}) is None
    assert check_args({**good, "default_release": "bookworm-backports"}) is None
    extra = check_args({**good, "autoremove": True}) or ""
    assert "unsupported option(s) autoremove" in extra and "ansible.builtin.apt directly" in extra
    assert "name [] is not a package" in (check_args({**good, "name": []}) or "")
    assert "name 1 is not a package" in (check_args({**good, "name": 1}) or "")
    assert "'a b; reboot' is not a Debian package name" in (
        check_args({**good, "name": ["a b; reboot"]}) or "")
    assert "'-o' is not a Debian package name" in (check_args({**good, "name": ["-o"]}) or "")
    assert "state: present only" in (check_args({**good, "state": "latest"}) or "")
    assert "update_cache 'often' is not a boolean. Fix: update_cache: true" in (
        check_args({**good, "update_cache": "often"}) or "")
    assert "cache_valid_time '1h' is not a whole number of seconds" in (
        check_args({**good, "cache_valid_time": "1h"}) or "")
    assert "default_release 12 is not a release name" in (
        check_args({**good, "default_release": 12}) or "")


def test_module_args_probe_and_answer() -> None:
    assert module_args({"name": "a, b", "update_cache": "yes", "cache_valid_time": "60"}) == {
        "name": ["a", "b"], "state": "present", "update_cache": True, "cache_valid_time": 60}
    assert module_args({"name": ["a"], "install_recommends": False}) == {
        "name": ["a"], "state": "present", "install_recommends": False}
    assert probe_command(["haproxy", "g++"]) == (
        "LC_ALL=C dpkg-query --show --showformat='${db:Status-Abbrev} ${Package}\\n' "
        "-- haproxy g++")
    assert probe_judges(["haproxy", "libstdc++6", "python3.11"])
    assert not probe_judges(["haproxy=2.6*"]) and not probe_judges(["libc6:i386"])
    assert all_installed(0, "ii  a\nii  b\n", ["a", "b"])
    assert all_installed(0, "ii  a\nii  a\n", ["a"])  # two architectures, both installed
    assert not all_installed(0, "ii  a\nrc  a\n", ["a"])
    assert not all_installed(1, "ii  a\n", ["a", "b"])
    assert not all_installed(0, "ii  a\nii  c\n", ["a", "b"])
    assert not all_installed(0, "", ["a"])
