"""A scenario's own playbook run from its testinfra checks, as molecule runs it: the
scenario's inventory (MOLECULE_INVENTORY_FILE), the checkout's roles and collection, no
colour. Shared by the verifiers that run a playbook (engine_group, model_artifacts)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_playbook(playbook: Path, *args: str, timeout: int = 900
                 ) -> subprocess.CompletedProcess[str]:
    """ansible-playbook PLAYBOOK ARGS against the scenario's hosts; never raises on rc."""
    env = {**os.environ, "ANSIBLE_ROLES_PATH": str(ROOT / "roles"),
           "ANSIBLE_COLLECTIONS_PATH": os.pathsep.join(
               [str(ROOT / ".collections"), "~/.ansible/collections",
                "/usr/share/ansible/collections"]),
           "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0"}
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"),
         "-i", os.environ["MOLECULE_INVENTORY_FILE"], str(playbook), *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False)
