"""The target-side modules run on every Python a managed host may have: 3.9 through 3.13.

Each module runs as Ansible ships it (an AnsiballZ payload with its module_utils) on the oldest
(3.9) and the newest Python this machine offers, through ansible-playbook with
ansible_python_interpreter set to that interpreter, against localhost. A module that uses a
3.10+ feature (zip(strict=), hashlib.file_digest, match, X | Y at run time) fails here on 3.9.
An interpreter that is not installed is skipped, naming it.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from _scripts import ansible_env

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = shutil.which("ansible-playbook", path=str(Path(sys.executable).parent)) or \
    shutil.which("ansible-playbook")
OLDEST = (3, 9)
NEWEST_KNOWN = (3, 13)
# The modules that run on the managed host. A file without AnsibleModule only documents an
# action plugin that runs on the control node (managed_file, plan_fleet).
MODULES = sorted(p.stem for p in (ROOT / "plugins/modules").glob("*.py")
                 if "AnsibleModule" in p.read_text())


def interpreters() -> dict[tuple[int, int], str]:
    """(major, minor) -> a python3.X executable, from PATH, /usr/bin and pyenv."""
    found: dict[tuple[int, int], str] = {}
    pyenv = os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))
    for minor in range(OLDEST[1], 20):
        name = f"python3.{minor}"
        # pyenv's shims are no interpreters (they only dispatch to the selected version).
        candidates = [*sorted(glob.glob(f"{pyenv}/versions/3.{minor}.*/bin/{name}")),
                      shutil.which(name, path="/usr/bin:/usr/local/bin"), shutil.which(name)]
        for path in candidates:
            if path and os.access(path, os.X_OK) and "/shims/" not in path:
                found[(3, minor)] = path
                break
    return found


FOUND = interpreters()
NEWEST = max(FOUND) if FOUND else NEWEST_KNOWN


def test_every_module_is_exercised() -> None:
    assert MODULES == ["deploy_manifest", "gpu_facts", "model_fetch", "model_lock",
                       "model_verify"], "a new module: give it a task in _tasks()"


def _tasks(data: Path, files: list[dict[str, object]], digest: str) -> list[dict[str, object]]:
    fq = "vllm_fleet.serving."
    return [
        {"name": "Interpreter", "ansible.builtin.setup": {"gather_subset": ["!all", "!min",
                                                                            "python"]}},
        {"name": "deploy_manifest", fq + "deploy_manifest": {"paths": [str(data / "a.bin")]},
         "register": "manifest"},
        {"name": "model_verify (full, two workers: the process pool)",
         fq + "model_verify": {"action": "verify", "path": str(data), "files": files,
                               "full": True, "jobs": 2},
         "register": "verified"},
        {"name": "gpu_facts on a fixture tree",
         fq + "gpu_facts": {"root": str(ROOT / "tests/data/gpu/sysfs/hgx-h200-x4"),
                            "query_nvidia_smi": False},
         "register": "gpus"},
        # model_lock runs delegated to the control node (it reads YAML with the controller's
        # PyYAML); here it only has to load and check its arguments on the target's Python.
        {"name": "model_lock refuses a call without lock_file (the module itself loaded)",
         fq + "model_lock": {}, "register": "lock", "ignore_errors": True},
        {"name": "model_fetch refuses a call without repo_id (the module itself loaded)",
         fq + "model_fetch": {}, "register": "fetch", "ignore_errors": True},
        {"name": "Report", "ansible.builtin.debug": {"msg": {
            "python": "{{ ansible_facts.python.version_info[:2] }}",
            "manifest": "{{ manifest.manifest }}",
            "verified": "{{ verified }}",
            "gpus": "{{ gpus.ansible_facts | default(gpus) }}",
            "lock_msg": "{{ lock.msg | default('') }}",
            "fetch_msg": "{{ fetch.msg | default('') }}",
            "digest": digest}}},
    ]


@pytest.mark.parametrize("version", [OLDEST, NEWEST], ids=lambda v: f"python{v[0]}.{v[1]}")
def test_the_modules_run_on_the_target_python(version: tuple[int, int], tmp_path: Path) -> None:
    python = FOUND.get(version)
    if python is None:
        pytest.skip(f"python{version[0]}.{version[1]} is not installed here (looked on PATH, "
                    "/usr/bin and ~/.pyenv/versions)")
    assert PLAYBOOK, "ansible-playbook is not installed"
    data = tmp_path / "model"
    data.mkdir()
    payload = os.urandom(3 << 20)
    (data / "a.bin").write_bytes(payload)
    (data / "b.bin").write_bytes(b"b" * 1000)
    digest = hashlib.sha256(payload).hexdigest()
    files: list[dict[str, object]] = [
        {"path": name, "size": (data / name).stat().st_size,
         "sha256": hashlib.sha256((data / name).read_bytes()).hexdigest()}
        for name in ("a.bin", "b.bin")]
    playbook = tmp_path / "target.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "target", "hosts": "localhost", "connection": "local", "gather_facts": False,
        "tasks": _tasks(data, files, digest)}]))
    ran = subprocess.run(
        [PLAYBOOK, "-i", "localhost,", "-e", f"ansible_python_interpreter={python}",
         str(playbook)], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
        env=ansible_env(ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
                        ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp")))
    assert ran.returncode == 0, ran.stdout[-4000:] + ran.stderr[-4000:]
    result = json.loads(ran.stdout[ran.stdout.index("{"):])
    report = result["plays"][0]["tasks"][-1]["hosts"]["localhost"]["msg"]
    assert list(report["python"]) == list(version), report["python"]
    assert report["manifest"][str(data / "a.bin")].startswith(f"sha256:{digest} ")
    verified = report["verified"]
    assert (verified["checked"], verified["bad"], verified["damaged"]) == (2, [], []), verified
    assert report["gpus"]["gpu_facts"]["gpu_count"] == 4, report["gpus"]
    assert re.search(r"missing required arguments: .*lock_file", report["lock_msg"]), \
        report["lock_msg"]
    assert re.search(r"missing required arguments: .*repo_id", report["fetch_msg"]), \
        report["fetch_msg"]
