"""bench/site_converge.py builds its floor from the local inventory as Ansible reads it: a
variable moved between that inventory's files must not break the benchmark."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from _scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
site_converge = load_script("bench/site_converge.py", "site_converge")


def inventory_vars() -> dict[str, Any]:
    """What ansible-inventory says the local target's host gets: the reference."""
    tool = shutil.which("ansible-inventory", path=str(Path(sys.executable).parent))
    out = subprocess.run(
        [tool or "ansible-inventory", "-i", str(ROOT / "inventories/local"), "--host",
         "local-engine"],
        check=True, capture_output=True, text=True, cwd=ROOT)
    return dict(yaml.safe_load(out.stdout))


def test_group_vars_match_ansible_inventory() -> None:
    ours = site_converge.group_vars()
    theirs = inventory_vars()
    for key in ("vllm_install_package", "vllm_install_version", "vllm_install_uv_remove",
                "vllm_install_uv_constraints"):
        assert ours[key] == theirs[key], key


def test_floor_installs_the_inventory_pins() -> None:
    engine = inventory_vars()
    package = shlex.quote(f"{engine['vllm_install_package']}=={engine['vllm_install_version']}")
    for installer in ("pip", "uv"):
        system, python = site_converge.floor_steps(installer)
        assert package in python, installer
        for pin in engine["vllm_install_uv_constraints"]:
            assert pin in system, (installer, pin)
    pip = site_converge.floor_steps("pip")[1]
    assert "pip uninstall" in pip and "torchvision" in pip
    uv = site_converge.floor_steps("uv")[1]
    assert "--excludes" in uv and "uv==" in uv
