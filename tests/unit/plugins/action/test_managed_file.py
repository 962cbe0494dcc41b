"""plugins/action/managed_file.py with the real ansible-playbook on this machine (connection
local, a scratch directory): it writes through ansible.builtin.template/copy, answers
"unchanged" with one shell command and no module call, and hands every difference back to the
builtin."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _scripts import ansible_env
from test_plan_playbook import PLAYBOOK

ROOT = Path(__file__).resolve().parents[4]
from ansible_collections.vllm_fleet.serving.plugins.action.managed_file import (  # noqa: E402
    attributes_match,
    check_args,
    parse_probe,
    probe_command,
    unchanged,
)

PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  vars:
    greeting: hello
  roles:
    - role: demo
"""
TASKS = """
- name: From a template
  managed_file:
    template: greeting.j2
    dest: "{{ out }}/greeting.txt"
    mode: "{{ file_mode | default('0640') }}"
    validate: "{{ validate | default('test -s %s') }}"
- name: From a role file
  managed_file:
    src: static.txt
    dest: "{{ out }}/static.txt"
    mode: "0644"
- name: From content
  managed_file:
    content: "{{ greeting }} from content\\n"
    dest: "{{ out }}/content.txt"
    mode: "0600"
- name: A directory
  managed_file:
    dest: "{{ out }}/cache"
    state: directory
    mode: "0750"
"""


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    role = tmp_path / "roles" / "demo"
    for sub in ("tasks", "templates", "files"):
        (role / sub).mkdir(parents=True)
    (role / "tasks" / "main.yml").write_text(TASKS)
    (role / "templates" / "greeting.j2").write_text("# {{ ansible_managed }}\n{{ greeting }}\n")
    (role / "files" / "static.txt").write_text("static\n")
    (tmp_path / "site.yml").write_text(PLAY)
    (tmp_path / "out").mkdir()
    # Counts the module runs: every module call starts this interpreter once.
    counter = tmp_path / "python"
    counter.write_text(f"#!/bin/sh\necho x >> {tmp_path}/calls\nexec {sys.executable} \"$@\"\n")
    counter.chmod(0o755)
    return tmp_path


def play(project: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], int, dict[str, Any]]:
    (project / "calls").unlink(missing_ok=True)
    env = ansible_env(False, ANSIBLE_ROLES_PATH=str(project / "roles"),
                      ANSIBLE_ACTION_PLUGINS=str(ROOT / "plugins/action"),
                      ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
                      ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    proc = subprocess.run(
        [PLAYBOOK, "-i", "localhost,", str(project / "site.yml"), "-e", f"out={project}/out",
         "-e", f"ansible_python_interpreter={project}/python", *args],
        cwd=project, env=env, capture_output=True, text=True, timeout=120, check=False)
    calls = len((project / "calls").read_text().splitlines()) if (project / "calls").exists() else 0
    report = json.loads(proc.stdout) if proc.stdout.startswith("{") else {}
    return proc, calls, report


def changed_tasks(report: dict[str, Any]) -> list[str]:
    return [t["task"]["name"].removeprefix("demo : ") for t in report["plays"][0]["tasks"]
            if t["hosts"]["localhost"].get("changed")]


def test_writes_then_reruns_without_a_module_call(project: Path) -> None:
    first, _calls, report = play(project)
    assert first.returncode == 0, first.stdout + first.stderr
    assert len(changed_tasks(report)) == 4
    out = project / "out"
    assert stat.S_IMODE((out / "cache").stat().st_mode) == 0o750
    assert (out / "greeting.txt").read_text().endswith("hello\n")
    assert stat.S_IMODE((out / "content.txt").stat().st_mode) == 0o600
    again, calls, report = play(project)
    assert again.returncode == 0 and changed_tasks(report) == []
    assert calls == 0  # ansible.builtin.template/copy take 6: stat, then file, for each


def test_a_directory_drifted_or_replaced_goes_to_the_builtin(project: Path) -> None:
    play(project)
    cache = project / "out" / "cache"
    cache.chmod(0o700)
    again, calls, report = play(project)
    assert again.returncode == 0 and changed_tasks(report) == ["A directory"] and calls == 1
    assert stat.S_IMODE(cache.stat().st_mode) == 0o750
    cache.rmdir()
    cache.write_text("a file where the directory belongs\n")
    bad, _calls, _report = play(project)  # ansible.builtin.file refuses to replace it
    assert bad.returncode != 0 and cache.is_file()


def test_a_link_in_place_of_the_file_goes_to_the_builtin(project: Path) -> None:
    play(project)
    out = project / "out"
    (out / "elsewhere.txt").write_bytes((out / "static.txt").read_bytes())
    (out / "elsewhere.txt").chmod(0o644)
    (out / "static.txt").unlink()
    (out / "static.txt").symlink_to(out / "elsewhere.txt")
    again, calls, _report = play(project)
    assert again.returncode == 0, again.stdout + again.stderr
    assert calls > 0  # the same bytes behind a link are not "unchanged": the builtin decides


def test_content_and_mode_drift_go_back_to_the_builtin(project: Path) -> None:
    play(project)
    out = project / "out"
    (out / "greeting.txt").write_text("edited by hand\n")
    (out / "static.txt").chmod(0o666)
    again, _calls, report = play(project)
    assert again.returncode == 0
    assert changed_tasks(report) == ["From a template", "From a role file"]
    assert (out / "greeting.txt").read_text().endswith("hello\n")
    assert stat.S_IMODE((out / "static.txt").stat().st_mode) == 0o644


def test_check_mode_shows_the_diff_and_writes_nothing(project: Path) -> None:
    play(project)
    target = project / "out" / "greeting.txt"
    target.write_text("edited by hand\n")
    check, _calls, report = play(project, "--check", "--diff")
    assert check.returncode == 0 and changed_tasks(report) == ["From a template"]
    diff = report["plays"][0]["tasks"][0]["hosts"]["localhost"]["diff"]
    assert "edited by hand" in json.dumps(diff) and "hello" in json.dumps(diff)
    assert target.read_text() == "edited by hand\n"


def test_a_failed_validate_leaves_the_live_file(project: Path) -> None:
    play(project)
    target = project / "out" / "greeting.txt"
    target.write_text("edited by hand\n")
    bad, _calls, _report = play(project, "-e", "validate='false %s'")
    assert bad.returncode != 0 and "failed to validate" in bad.stdout
    assert target.read_text() == "edited by hand\n"


def test_an_unsupported_option_is_refused_with_the_fix(project: Path) -> None:
    tasks = project / "roles" / "demo" / "tasks" / "main.yml"
    tasks.write_text(TASKS.replace('    mode: "0600"', '    mode: "0600"\n    backup: true'))
    proc, _calls, _report = play(project)
    assert proc.returncode != 0
    assert "unsupported option(s) backup" in proc.stdout
    assert not (project / "out" / "content.txt").exists()


def test_argument_checks() -> None:
    assert check_args({"template": "a.j2", "dest": "/x", "mode": "0644"}) is None
    assert "exactly one of" in (check_args({"template": "a", "src": "b", "dest": "/x"}) or "")
    assert "exactly one of" in (check_args({"content": "a"}) or "")
    assert "octal string" in (check_args({"content": "a", "dest": "/x", "mode": "u=rw"}) or "")
    assert check_args({"dest": "/x", "state": "directory", "mode": "0755"}) is None
    assert "dest, owner, group and mode only" in (
        check_args({"dest": "/x", "state": "directory", "content": "a"}) or "")
    assert "file or directory" in (check_args({"dest": "/x", "state": "absent"}) or "")


def test_unchanged_needs_bytes_type_owner_group_and_mode() -> None:
    st = {"exists": True, "isreg": True, "islnk": False, "checksum": "c", "pw_name": "root",
          "uid": 0, "gr_name": "vllm", "gid": 997, "mode": "0640"}
    args = {"owner": "root", "group": "vllm", "mode": "0640"}
    assert unchanged(st, "c", args)
    assert unchanged(st, "c", {"owner": "0", "group": "997", "mode": "640"})
    assert not unchanged(st, "d", args)
    assert not unchanged({**st, "islnk": True}, "c", args)
    assert not unchanged({**st, "exists": False}, "c", args)
    assert not attributes_match(st, {**args, "group": "root"})
    assert not attributes_match(st, {**args, "mode": "0644"})


def test_probe_output_is_read_strictly(tmp_path: Path) -> None:
    target = tmp_path / "it's here.txt"
    target.write_text("hello\n")
    target.chmod(0o640)
    run = subprocess.run(["sh", "-c", probe_command(str(target))], capture_output=True,
                         text=True, check=False)
    found = parse_probe(run.returncode, run.stdout)
    assert found is not None and found["mode"] == "0640" and found["isreg"]
    assert found["checksum"] == "f572d396fae9206628714fb2ce00f72e94f2258f"  # sha1 of hello\n
    assert found["uid"] == target.stat().st_uid
    link = tmp_path / "link"
    link.symlink_to(target)
    for path in (link, tmp_path, tmp_path / "missing"):
        run = subprocess.run(["sh", "-c", probe_command(str(path))], capture_output=True,
                             text=True, check=False)
        assert parse_probe(run.returncode, run.stdout) is None, path
    run = subprocess.run(["sh", "-c", probe_command(str(tmp_path), directory=True)],
                         capture_output=True, text=True, check=False)
    found = parse_probe(run.returncode, run.stdout)
    assert found is not None and found["isdir"] and found["checksum"] is None
    for path in (target, tmp_path / "missing"):
        run = subprocess.run(["sh", "-c", probe_command(str(path), directory=True)],
                             capture_output=True, text=True, check=False)
        assert parse_probe(run.returncode, run.stdout) is None, path
    assert parse_probe(0, "root\nroot\n0\n0\n644\n") is None  # a line short
    assert parse_probe(0, "root\nroot\n0\n0\n644\nnot-a-sha1  -\n") is None
