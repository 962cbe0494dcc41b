"""Import the project's stand-alone scripts (role files installed on hosts) for testing."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

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
