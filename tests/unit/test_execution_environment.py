"""The execution environment: requirements.txt against requirements-dev.txt, ansible-builder's
build context (scripts/ee.py, with the real ansible-builder and ansible-galaxy), and the rebuild
report directory a job can point at a kept path."""

from __future__ import annotations

import importlib.metadata
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml
from _scripts import ansible_env, load_script
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
ee = load_script("scripts/ee.py", "ee_script")
PLAYBOOK = shutil.which("ansible-playbook", path=str(Path(sys.executable).parent)) or \
    "ansible-playbook"


def test_requirements_pins_agree_with_dev() -> None:
    runtime = ee.pins(ROOT / "requirements.txt")
    dev = ee.pins(ROOT / "requirements-dev.txt")
    assert {"ansible-core", "ansible", "huggingface-hub", "matplotlib", "jinja2"} <= set(runtime)
    differing = {name: (version, dev.get(name)) for name, version in runtime.items()
                 if dev.get(name) != version}
    assert not differing, f"requirements.txt vs requirements-dev.txt: {differing}"


def test_requirements_are_closed() -> None:
    """Every dependency of a package in requirements.txt (as installed here) is pinned too."""
    runtime = ee.pins(ROOT / "requirements.txt")
    installed: dict[str, str | None] = {}
    for name in runtime:
        try:
            installed[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            installed[name] = None
    if any(installed[name] != version for name, version in runtime.items()):
        pytest.skip("requirements.txt is not what this interpreter has installed (the ansible-core"
                    " 2.20 leg's venv); .venv, which has it, runs this check")
    missing: dict[str, str] = {}
    for name in runtime:
        for line in importlib.metadata.distribution(name).requires or []:
            req = Requirement(line)
            if req.marker and not req.marker.evaluate({"extra": ""}):
                continue
            key = re.sub(r"[-_.]+", "-", req.name).lower()
            if key not in runtime:
                missing[key] = name
    assert not missing, f"needed by requirements.txt, not pinned there: {missing}"


def test_pins_refuses_an_unpinned_line(tmp_path: Path) -> None:
    loose = tmp_path / "requirements.txt"
    loose.write_text("ansible-core>=2.21\n")
    with pytest.raises(ValueError, match="not pinned"):
        ee.pins(loose)


def test_collection_ee_metadata_names_the_files() -> None:
    meta = yaml.safe_load((ROOT / "meta/execution-environment.yml").read_text())
    assert meta["dependencies"] == {"python": "meta/ee-requirements.txt", "system": "bindep.txt"}
    assert all((ROOT / f).is_file() for f in meta["dependencies"].values())


@pytest.fixture(scope="module")
def context(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`scripts/ee.py check`: the tarball, ansible-builder create, the checks (exit 0)."""
    ctx = tmp_path_factory.mktemp("ee") / "context"
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts/ee.py"), "check", "--context", str(ctx)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    assert "docker.io/library/python:3.13-slim-trixie" in result.stdout
    return ctx


def test_ee_context_is_complete(context: Path) -> None:
    assert (context / "Containerfile").is_file()
    for name in ("requirements.txt", "bindep.txt"):
        assert (context / "_build" / name).read_bytes() == (ROOT / name).read_bytes()
    with tarfile.open(context / "_build/collection" / ee.TARBALL) as tar:
        names = set(tar.getnames())
    assert set(ee.COLLECTION_MEMBERS) <= names
    assert not any(n.startswith(("build/", ".venv/", "benchmarks/")) for n in names), \
        "galaxy.yml's build_ignore was not applied"
    containerfile = (context / "Containerfile").read_text()
    assert 'ARG PYCMD="/usr/local/bin/python3"' in containerfile
    assert 'ARG ANSIBLE_INSTALL_REFS="ansible-core==2.21.5 ansible-runner==' in containerfile
    assert 'ARG ANSIBLE_GALAXY_CLI_COLLECTION_OPTS="--no-deps"' in containerfile
    assert ee.check_context(ROOT / "execution-environment.yml", context) == []


def test_ee_check_catches_drift(context: Path, tmp_path: Path) -> None:
    drifted = tmp_path / "context"
    shutil.copytree(context, drifted)
    (drifted / "_build/requirements.txt").write_text("ansible-core==2.20.0\n")
    (drifted / "_build/bindep.txt").unlink()
    containerfile = drifted / "Containerfile"
    containerfile.write_text(
        containerfile.read_text()
        .replace('ARG PYCMD="/usr/local/bin/python3"', 'ARG PYCMD="/usr/bin/python3.11"')
        .replace("ansible-core==2.21.5", "ansible-core==2.20.0")
        .replace('ARG ANSIBLE_GALAXY_CLI_COLLECTION_OPTS="--no-deps"',
                 'ARG ANSIBLE_GALAXY_CLI_COLLECTION_OPTS=""'))
    (drifted / "_build/collection" / ee.TARBALL).unlink()
    problems = "\n".join(ee.check_context(ROOT / "execution-environment.yml", drifted))
    assert "requirements.txt: differs from" in problems
    assert "bindep.txt: missing" in problems
    assert "ARG PYCMD is '/usr/bin/python3.11'" in problems
    assert "lacks ansible-core==2.21.5" in problems
    assert "ARG ANSIBLE_GALAXY_CLI_COLLECTION_OPTS is '', execution-environment.yml says " \
        "'--no-deps'" in problems
    assert f"{ee.TARBALL}: missing" in problems
    (drifted / "Containerfile").unlink()
    assert "missing" in ee.check_context(ROOT / "execution-environment.yml", drifted)[0]


def test_ee_core_pin_is_requirements_core_pin() -> None:
    spec = yaml.safe_load((ROOT / "execution-environment.yml").read_text())
    core = spec["dependencies"]["ansible_core"]["package_pip"]
    assert core == f"ansible-core=={ee.pins(ROOT / 'requirements.txt')['ansible-core']}"


def test_navigator_settings_use_the_ee_image() -> None:
    nav = yaml.safe_load((ROOT / "ansible-navigator.yml").read_text())["ansible-navigator"]
    spec = yaml.safe_load((ROOT / "execution-environment.yml").read_text())
    assert nav["execution-environment"]["image"] in spec["options"]["tags"]
    assert nav["mode"] == "stdout"
    assert nav["playbook-artifact"]["enable"] is True


def test_rebuild_refuses_an_unwritable_report_dir_before_any_host(tmp_path: Path) -> None:
    """rebuild.yml creates rebuild_report_dir first: a path that cannot be made stops the play
    with the variable and the fix named, before the first task on the host (which is never
    reachable here: 192.0.2.1 is TEST-NET-1)."""
    config = tmp_path / "config.json"
    config.write_text((ROOT / "inventories/example/models/Qwen2.5-72B-Instruct/config.json")
                      .read_text())
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"vllm_servers": {
        "hosts": {"gpu-1.test": {"ansible_host": "192.0.2.1"}},
        "vars": {"vllm_plan_model_config_file": str(config), "vllm_plan_gpu_count": 2,
                 "vllm_plan_options": {"gpu": "H200", "tensor_parallel_size": 2}}}}}}))
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = subprocess.run(
        [PLAYBOOK, "-i", str(inventory), str(ROOT / "playbooks/rebuild.yml"),
         "-e", f"rebuild_report_dir={blocker}/reports"],
        cwd=ROOT, env=ansible_env(), capture_output=True, text=True, timeout=300, check=False)
    out = result.stdout + result.stderr
    assert result.returncode != 0
    assert f"rebuild_report_dir {blocker}/reports cannot be created" in out, out[-3000:]
    assert "nothing was changed" in out
    assert "Record every deployed file before the rebuild" not in out
    assert "UNREACHABLE" not in out
