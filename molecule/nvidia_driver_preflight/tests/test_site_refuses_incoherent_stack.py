"""playbooks/site.yml with an inventory that pairs Debian's R550 driver with the pinned GPU
engine (vLLM 0.32.0: torch 2.13.0, CUDA 13.0): the plan refuses it before any host is
touched, naming R580 and an engine release whose CUDA R550 runs. The scenario's host is in
the inventory as the engine host; nothing may change on it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "inventories" / "example"
CONTAINER = "nvidia_driver_preflight-debian12"  # the platform of molecule.yml


def snapshot(host: Any) -> str:
    return str(host.check_output(
        "dpkg-query -W -f='${Package} ${Version}\\n'; "
        "find /srv /etc/apt/sources.list.d /etc/modprobe.d /etc/systemd/system -maxdepth 1 "
        "2>/dev/null | sort; true"))


def site_run(tmp_path: Path, host_name: str) -> subprocess.CompletedProcess[str]:
    inventory = {"all": {"children": {"vllm_servers": {
        "hosts": {host_name: {"ansible_connection": "containers.podman.podman"}},
        "vars": {
            # The example fleet's H200 group, with Debian's driver instead of NVIDIA's R580.
            "vllm_plan_model_config_file": str(EXAMPLE / "models" / "Qwen2.5-72B-Instruct"
                                               / "config.json"),
            "vllm_plan_model": "/srv/vllm/models/Qwen2.5-72B-Instruct/current",
            "vllm_plan_gpu_count": 2,
            "vllm_plan_options": yaml.safe_load(
                (EXAMPLE / "group_vars" / "h200.yml").read_text())["vllm_plan_options"],
            "nvidia_driver_source": "debian",
            "nvidia_driver_version": "550.163.01",
            "model_artifacts_name": "Qwen2.5-72B-Instruct",
        }}}}}
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(inventory))
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0",
           "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")}
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(path),
         str(ROOT / "playbooks" / "site.yml")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_site_refuses_debian_550_with_the_cuda13_engine(host: Any, tmp_path: Path) -> None:
    before = snapshot(host)
    run = site_run(tmp_path, CONTAINER)
    out = run.stdout
    assert run.returncode != 0, out[-3000:]
    assert "[REFUSED] driver_cannot_run_engine" in out, out[-3000:]
    assert "R580" in out and "550.163.01" in out and "vllm_install_version" in out
    assert "Traceback" not in out + run.stderr
    # The refusal came from the control-node plan: no task of a later play ran.
    assert "TASK [nvidia_driver" not in out and "TASK [vllm_server" not in out
    assert snapshot(host) == before
    assert not host.file("/srv/vllm").exists
