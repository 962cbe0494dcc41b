"""The engine's inputs refused in site.yml's plan play, before any host is touched (issue 20,
item 9): the real ansible-playbook on an inventory whose host does not exist, so that a value
the preflight let through would show as an unreachable host in the next play."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from _scripts import ansible_env
from test_plan_playbook import PLAYBOOK

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "inventories/example/models/Qwen2.5-72B-Instruct/config.json"


def inventory(tmp: Path) -> Path:
    data = {"all": {"children": {"vllm_servers": {
        "hosts": {"gpu-1.invalid": None},
        "vars": {"vllm_plan_model_config_file": str(CONFIG), "vllm_plan_gpu_count": 2,
                 "vllm_plan_options": {"gpu": "H200", "tensor_parallel_size": 2,
                                       "kv_cache_dtype": "fp8", "max_model_len": 32768},
                 "vllm_plan_model": "/srv/vllm/models/q/current",
                 "vllm_plan_served_model_name": "q", "vllm_plan_show": False,
                 "vllm_server_api_key": "test-key-not-a-secret",
                 "ansible_connection": "ssh", "ansible_ssh_timeout": 2}}}}}
    path = tmp / "hosts.yml"
    path.write_text(yaml.safe_dump(data))
    return path


def site(tmp: Path, extra: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PLAYBOOK, "-i", str(inventory(tmp)), str(ROOT / "playbooks/site.yml"),
         "-e", json.dumps(extra)],
        cwd=ROOT, env=ansible_env(), capture_output=True, text=True, timeout=300, check=False)


REFUSED: list[tuple[str, dict[str, Any], str]] = [
    ("MemoryMax not a size", {"vllm_server_memory_max": "lots"},
     'vllm_server_memory_max is "lots": systemd\'s MemoryMax takes bytes'),
    ("MemoryMax over 100%", {"vllm_server_memory_max": "150%"},
     'vllm_server_memory_max is "150%"'),
    ("LimitNOFILE not a number", {"vllm_server_limit_nofile": "many"},
     'vllm_server_limit_nofile is "many"'),
    ("empty user", {"vllm_install_user": ""}, 'vllm_install_user is "": the engine needs its own'),
    ("root user", {"vllm_install_user": "root"}, 'vllm_install_user is "root"'),
    ("empty group", {"vllm_install_group": ""}, 'vllm_install_group is ""'),
    ("root path climbing out", {"vllm_install_root": "/srv/../etc"},
     'vllm_install_root is "/srv/../etc": Fix: an absolute directory'),
    ("config dir with a space", {"vllm_server_config_dir": "/etc/my vllm"},
     'vllm_server_config_dir is "/etc/my vllm"'),
    ("restart delay not seconds", {"vllm_server_restart_sec": "10x"},
     'vllm_server_restart_sec is "10x"'),
    ("start timeout zero", {"vllm_server_timeout_start_sec": 0},
     'vllm_server_timeout_start_sec is 0: systemd'),
    ("device access mode", {"vllm_server_device_allow": ["/dev/nvidia0 rwx"]},
     'vllm_server_device_allow is ["/dev/nvidia0 rwx"]'),
    ("empty entrypoint word", {"vllm_server_entrypoint": [""]},
     'vllm_server_entrypoint is [""]'),
    ("multi-line environment value", {"vllm_server_environment": {"A": "x\ny"}},
     "vllm_server_environment must map variable names to one-line values"),
    ("API key with a space", {"vllm_server_api_key": "two words"},
     "vllm_server_api_key must be one line without spaces"),
    ("API key of one character", {"vllm_server_api_key": "x"},
     "vllm_server_api_key is 1 characters long; a key every client sends must be at least 16"),
    ("API key of 15 characters", {"vllm_server_api_key": "a" * 15},
     "vllm_server_api_key is 15 characters long"),
]


@pytest.mark.parametrize(("extra", "named"), [c[1:] for c in REFUSED],
                         ids=[c[0] for c in REFUSED])
def test_bad_engine_input_is_refused_by_name_before_any_host(
        tmp_path: Path, extra: dict[str, Any], named: str) -> None:
    result = site(tmp_path, extra)
    out = result.stdout + result.stderr
    assert result.returncode != 0
    assert named in out, out[-3000:]
    assert "Fix" in out.split(named, 1)[1][:600]
    assert "UNREACHABLE" not in out and "PLAY [Driver, CUDA, model, engine" not in out
