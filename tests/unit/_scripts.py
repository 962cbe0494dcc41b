"""Import the project's stand-alone scripts (role files installed on hosts) for testing."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def load_script(relative: str, name: str) -> ModuleType:
    """Load ROOT/relative as module ``name`` (registered, so dataclasses resolve)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / relative)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def ansible_env(project_config: bool = True, **extra: str) -> dict[str, str]:
    """The environment for a nested ansible-playbook: the caller's, without colour (a caller's
    ANSIBLE_FORCE_COLOR, as molecule exports it, wins over NOCOLOR), with the project's
    ansible.cfg unless ``project_config`` is false, and ``extra`` on top."""
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0"}
    if project_config:
        env["ANSIBLE_CONFIG"] = str(ROOT / "ansible.cfg")
    return {**env, **extra}


def counted_project(tmp_path: Path, play: str) -> Path:
    """TMP_PATH with PLAY as site.yml, an empty bin/ (stand-ins go first on PATH) and a
    `python` that counts the module runs: every module call starts it once."""
    (tmp_path / "site.yml").write_text(play)
    counter = tmp_path / "python"
    counter.write_text(f"#!/bin/sh\necho x >> {tmp_path}/calls\nexec {sys.executable} \"$@\"\n")
    counter.chmod(0o755)
    (tmp_path / "bin").mkdir()
    return tmp_path


def run_counted(project: Path, playbook: str,
                *args: str) -> tuple[subprocess.CompletedProcess[str], int, dict[str, Any]]:
    """site.yml of a counted_project against localhost with the checkout's actions: the run,
    how many modules it started, and its JSON report."""
    (project / "calls").unlink(missing_ok=True)
    env = ansible_env(False, ANSIBLE_ACTION_PLUGINS=str(ROOT / "plugins/action"),
                      ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
                      ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    env["PATH"] = f"{project / 'bin'}:{env.get('PATH', os.environ['PATH'])}"
    proc = subprocess.run(
        [playbook, "-i", "localhost,", str(project / "site.yml"),
         "-e", f"ansible_python_interpreter={project}/python", *args],
        cwd=project, env=env, capture_output=True, text=True, timeout=120, check=False)
    calls = len((project / "calls").read_text().splitlines()) if (project / "calls").exists() else 0
    report = json.loads(proc.stdout) if proc.stdout.startswith("{") else {}
    return proc, calls, report
