"""The checkout builds as the collection vllm_fleet.serving, and the installed copy works alone.

scripts/build-collection.sh builds the tarball, ansible-galaxy installs it (offline, no
dependencies) into a scratch collections path; then, from a scratch working directory with
an empty ansible.cfg and only that path in view (no roles path, no sys.path scan), the
installed copy:
  - runs its playbook vllm_fleet.serving.plan (plan.yml, and in it the role vllm_plan with the
    kv_plan, model_config and port_plan filters) against its own copy of inventories/local;
  - runs the module deploy_manifest (its module_utils.hashing import included) on localhost;
  - runs the host role model_artifacts (its modules, action and files) on localhost in --check;
  - is what ansible-doc reports as the source of a filter and a module.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
FQCN = "vllm_fleet.serving"
# (installed collection root, scratch working directory, environment)
Installed = tuple[Path, Path, dict[str, str]]


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(BIN)) or shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed next to {sys.executable} nor on PATH")
    return found


def _env(scratch: Path, cfg: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANSIBLE_", "MOLECULE_")) and k != "PYTHONPATH"}
    env.update(ANSIBLE_CONFIG=str(cfg), ANSIBLE_COLLECTIONS_PATH=str(scratch),
               ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="false",
               ANSIBLE_ROLES_PATH=str(cfg.parent / "no-roles"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_LOCAL_TEMP=str(cfg.parent / "tmp"),
               ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    return env


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None,
         timeout: int = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    """(installed collection root, scratch cwd, environment) of a fresh build and install."""
    tmp = tmp_path_factory.mktemp("collection")
    galaxy = _tool("ansible-galaxy")
    built = _run([str(ROOT / "scripts/build-collection.sh"), str(tmp / "dist")], cwd=ROOT,
                 env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"})
    assert built.returncode == 0, built.stdout + built.stderr
    tarballs = list((tmp / "dist").glob("vllm_fleet-serving-*.tar.gz"))
    assert len(tarballs) == 1, tarballs
    scratch = tmp / "collections"
    cwd = tmp / "cwd"
    cwd.mkdir()
    cfg = cwd / "ansible.cfg"
    cfg.write_text("[defaults]\n")
    env = _env(scratch, cfg)
    done = _run([galaxy, "collection", "install", "--offline", "--no-deps", "-p", str(scratch),
                 str(tarballs[0])], cwd=cwd, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    root = scratch / "ansible_collections" / "vllm_fleet" / "serving"
    assert (root / "MANIFEST.json").is_file()
    yield root, cwd, env


def test_the_tarball_leaves_out_the_editable_install(
        installed: Installed) -> None:
    root = installed[0]
    assert not (root / ".collections").exists()
    assert (root / "plugins/module_utils/hashing.py").is_file()
    assert (root / "plugins/plugin_utils/vllm_planner/__init__.py").is_file()
    assert (root / "plugins/filter/kv_plan.py").is_file()
    assert (root / "plugins/modules/model_verify.py").is_file()


def test_ansible_doc_reads_the_installed_copy(installed: Installed) -> None:
    root, cwd, env = installed
    for kind, name in (("filter", "kv_plan"), ("module", "deploy_manifest")):
        shown = _run([_tool("ansible-doc"), "-t", kind, "--json", f"{FQCN}.{name}"], cwd, env)
        assert shown.returncode == 0, shown.stdout + shown.stderr
        filename = json.loads(shown.stdout)[f"{FQCN}.{name}"]["doc"]["filename"]
        assert Path(filename).is_relative_to(root.parent.parent.parent), filename
        assert not Path(filename).is_relative_to(ROOT), filename


def test_the_installed_plan_playbook_plans_the_local_inventory(
        installed: Installed) -> None:
    root, cwd, env = installed
    ran = _run([_tool("ansible-playbook"), "-i", str(root / "inventories" / "local"),
                f"{FQCN}.plan"], cwd, env)
    out = ran.stdout + ran.stderr
    assert ran.returncode == 0, out
    assert f"TASK [{FQCN}.vllm_plan : Plan each engine replica" in out
    assert "--kv-cache-memory-bytes" in out
    assert "failed=0" in out


def test_an_installed_module_runs_with_its_module_utils(
        installed: Installed, tmp_path: Path) -> None:
    cwd, env = installed[1:]
    data = tmp_path / "weights.bin"
    data.write_bytes(b"x" * 3000)
    ran = _run([_tool("ansible"), "localhost", "-c", "local", "-m", f"{FQCN}.deploy_manifest",
                "-a", json.dumps({"paths": [str(data)]}), "-o"], cwd, env)
    out = ran.stdout + ran.stderr
    assert ran.returncode == 0, out
    assert hashlib.sha256(data.read_bytes()).hexdigest() in out


def test_an_installed_host_role_runs_in_check_mode(installed: Installed, tmp_path: Path) -> None:
    """A role that works on a host, vllm_fleet.serving.model_artifacts, from the installed
    copy alone: its argument spec, its modules and action (model_verify, managed_file), its
    files and the lock check on the control node, run in --check against this machine with a
    pre-staged model. Check mode: nothing is written, on this machine or under the model root."""
    root, cwd, env = installed
    models = root / "inventories" / "local" / "models"
    model_root = tmp_path / "models"
    playbook = tmp_path / "role.yml"
    playbook.write_text(json.dumps([{
        "name": "A host role of the installed collection",
        "hosts": "localhost", "connection": "local", "gather_facts": False,
        "vars": {"model_artifacts_name": "tiny-qwen2",
                 "model_artifacts_source": "prestaged",
                 "model_artifacts_prestaged_dir": str(models / "tiny-qwen2"),
                 "model_artifacts_lock_file": str(models / "tiny-qwen2.lock.yml"),
                 "model_artifacts_root": str(model_root),
                 "model_artifacts_disk_margin_bytes": 1048576},
        "roles": [f"{FQCN}.model_artifacts"]}]))
    ran = _run([_tool("ansible-playbook"), "-i", "localhost,", "--check", "--diff",
                str(playbook)], cwd, env)
    out = ran.stdout + ran.stderr
    assert ran.returncode == 0, out
    for task in ("Validate the model lock on the control node",
                 "Verify the staged files against the lock (bad files are removed)",
                 "Install the start check, /usr/local/bin/vllm-model-check"):
        assert f"TASK [{FQCN}.model_artifacts : {task}]" in out, task
    assert "failed=0" in out
    assert not model_root.exists()
