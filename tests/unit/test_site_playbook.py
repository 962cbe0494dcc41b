"""playbooks/site.yml with the real ansible-playbook: a refused plan stops every host before
any is touched; every stage has its tag. And the local target's pre-staged model matches its
lock."""

from __future__ import annotations

import hashlib
import re
import subprocess
from pathlib import Path

import yaml
from _scripts import ansible_env
from test_plan_playbook import NOTES_TEMPLATE, PLAYBOOK

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "inventories/example/models/Qwen2.5-72B-Instruct/config.json"


def run_site(inventory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = ansible_env()
    return subprocess.run(
        [PLAYBOOK, "-i", str(inventory), str(ROOT / "playbooks/site.yml"), *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)


def two_host_inventory(tmp: Path) -> Path:
    """gpu-ok plans cleanly; gpu-bad carries the notes' unsafe flags. Neither host exists."""
    safe = {"gpu": "H200", "tensor_parallel_size": 2, "kv_cache_dtype": "fp8",
            "max_model_len": 32768}
    inventory = {"all": {"children": {
        "vllm_servers": {
            "hosts": {"gpu-ok.invalid": {"vllm_plan_options": safe},
                      "gpu-bad.invalid": {"vllm_plan_options": NOTES_TEMPLATE}},
            "vars": {"vllm_plan_model_config_file": str(CONFIG), "vllm_plan_gpu_count": 2,
                     "vllm_plan_model": "/srv/vllm/models/q/current",
                     "vllm_plan_served_model_name": "q", "vllm_plan_show": False,
                     "ansible_connection": "ssh", "ansible_ssh_timeout": 2}},
        "prometheus_servers": {"hosts": {"gpu-ok.invalid": None}}}}}
    path = tmp / "hosts.yml"
    path.write_text(yaml.safe_dump(inventory))
    return path


def test_one_refused_plan_stops_every_host_before_any_is_touched(tmp_path: Path) -> None:
    result = run_site(two_host_inventory(tmp_path))
    out = result.stdout + result.stderr
    assert result.returncode != 0
    assert "gpu-bad.invalid vllm-0: the plan is refused" in out
    assert "runtime_oom" in out or "preemption_storm" in out
    # No host was contacted: the later plays never started, not even for the good host.
    assert "UNREACHABLE" not in out
    assert "PLAY [Driver, CUDA, model, engine" not in out
    recap = dict(re.findall(r"^(gpu-\w+\.invalid)\s+: (.*)$", result.stdout, re.M))
    assert "unreachable=0" in recap["gpu-ok.invalid"] and "changed=0" in recap["gpu-ok.invalid"]


def test_every_stage_has_its_tag(tmp_path: Path) -> None:
    result = run_site(two_host_inventory(tmp_path), "--list-tags")
    assert result.returncode == 0, result.stderr
    tags = set()
    for line in result.stdout.splitlines():
        match = re.search(r"TASK TAGS: \[(.*)\]", line)
        if match:
            tags |= {t.strip() for t in match[1].split(",")}
    assert {"plan", "driver", "cuda", "model", "engine", "gateway", "monitoring", "benchmark",
            "verify", "restarts", "firewall"} <= tags


def test_local_prestaged_model_matches_its_lock() -> None:
    lock = yaml.safe_load((ROOT / "inventories/local/models/tiny-qwen2.lock.yml").read_text())
    folder = ROOT / "inventories/local/models/tiny-qwen2"
    assert sorted(f["path"] for f in lock["files"]) == sorted(p.name for p in folder.iterdir())
    lines = ""
    for f in lock["files"]:
        data = (folder / f["path"]).read_bytes()
        assert len(data) == f["size"] and hashlib.sha256(data).hexdigest() == f["sha256"]
        lines += f"{f['path']} {f['sha256']}\n"
    # The content address scripts/make_tiny_model.py --lock gives a model not on the Hub.
    assert lock["commit"] == hashlib.sha1(lines.encode(), usedforsecurity=False).hexdigest()


def listed_tasks(inventory: Path, *args: str) -> list[str]:
    result = run_site(inventory, "--list-tasks", *args)
    assert result.returncode == 0, result.stderr
    return [line.strip().split("\tTAGS:")[0].strip() for line in result.stdout.splitlines()
            if "TAGS:" in line]


def index_of(tasks: list[str], prefix: str, last: bool = False) -> int:
    found = [i for i, task in enumerate(tasks) if task.startswith(prefix)]
    return found[-1 if last else 0]


def test_engines_load_while_gateway_and_metrics_install_then_are_verified(
        tmp_path: Path) -> None:
    """The engine's starts are queued; its health and KV check come after the gateway and
    the metrics and before the gate, so a batch is verified before the next is touched."""
    tasks = listed_tasks(two_host_inventory(tmp_path))
    start = index_of(tasks, "vllm_server : Enable and start every replica")
    gateway = index_of(tasks, "engine_gateway : Configure the gateway")
    metrics = index_of(tasks, "gpu_metrics : Point node exporter")
    joined = index_of(tasks, "vllm_server : Wait for each replica's start job", last=True)
    kv_check = index_of(tasks, "vllm_server : Fail if an engine holds fewer KV cache tokens",
                        last=True)
    gate = index_of(tasks, "benchmark : ")
    assert start < gateway < metrics < joined < kv_check < gate


def test_engine_rollout_without_the_gateway_still_verifies(tmp_path: Path) -> None:
    """What the benchmark scenario's rollout runs: --tags engine,benchmark --skip-tags gateway."""
    tasks = listed_tasks(two_host_inventory(tmp_path), "--tags", "engine,benchmark",
                         "--skip-tags", "gateway")
    assert not any(t.startswith("engine_gateway : ") for t in tasks)
    assert index_of(tasks, "vllm_server : Wait for each replica's /health") < index_of(
        tasks, "benchmark : ")


def test_engine_install_runs_in_the_background_from_after_the_driver_to_the_units(
        tmp_path: Path) -> None:
    """The install starts in the background after the driver stage (which may reboot) and
    before CUDA and the model; the engine stage waits for its lock, reads the installed
    versions, installs in place what is missing, and only then writes any unit."""
    tasks = listed_tasks(two_host_inventory(tmp_path))
    driver = index_of(tasks, "nvidia_driver : ", last=True)
    started = index_of(tasks, "vllm_install : Start installing the pinned vLLM in the background")
    cuda = index_of(tasks, "cuda_toolkit : ")
    model = index_of(tasks, "model_artifacts : ", last=True)
    joined = index_of(tasks, "vllm_install : Wait for any install in progress", last=True)
    in_place = index_of(tasks,
                        "vllm_install : Install the pinned vLLM into the virtual environment")
    unit = index_of(tasks, "vllm_server : Write each replica's systemd unit")
    assert driver < started < cuda < model < joined < in_place < unit
    # The engine's torch is checked against the driver after the install, before any unit.
    cuda_check = index_of(tasks, "vllm_install : Stop before the units if the engine's torch")
    assert in_place < cuda_check < unit


def test_each_role_is_entered_once_and_its_packages_come_with_its_configuration(
        tmp_path: Path) -> None:
    """One entry point per role: the gateway, the exporters and Prometheus install their
    packages in their own stage, after the engine's units (a failed engine install leaves
    them as they were), each once; vllm_install's `background` and vllm_server's `verify`
    entry points are the only others in the batch play."""
    tasks = listed_tasks(two_host_inventory(tmp_path))
    last_play = index_of(tasks, "play #3")
    unit = index_of(tasks, "vllm_server : Write each replica's systemd unit")
    for package, configure in [
            ("engine_gateway : Install HAProxy", "engine_gateway : Configure the gateway"),
            ("gpu_metrics : Install node exporter", "gpu_metrics : Point node exporter"),
            ("prometheus_server : Install Prometheus", "prometheus_server : Render the scrape")]:
        assert unit < index_of(tasks, package) < index_of(tasks, configure), package
        assert sum(t.startswith(package) for t in tasks[:last_play]) == 1, package
    # A Prometheus server that is also an engine host is configured in its batch, while the
    # model loads (before the replicas are verified); dedicated ones get the last play.
    verified = index_of(tasks, "vllm_server : Wait for each replica's /health", last=True)
    assert unit < index_of(tasks, "prometheus_server : Wait until Prometheus is ready") < verified
    plays = run_site(two_host_inventory(tmp_path), "--list-hosts").stdout
    assert re.search(r"play #3 \(prometheus_servers:!vllm_servers\)", plays), plays
    batch = yaml.safe_load((ROOT / "playbooks/site.yml").read_text())[1]["tasks"]
    entered = sorted(f"{t[k]['name']}:{t[k].get('tasks_from', 'main')}"
                     for t in batch for k in ("ansible.builtin.import_role",) if k in t)
    assert entered == sorted([
        "benchmark:main", "cuda_toolkit:main", "engine_gateway:main", "engine_gateway:verify",
        "engine_restarts:main", "gpu_metrics:main", "host_firewall:main",
        "model_artifacts:main", "nvidia_driver:main", "prometheus_server:main",
        "vllm_install:background", "vllm_server:main", "vllm_server:verify"]), entered


def test_firewall_preflight_runs_in_the_plan_and_the_allowlist_after_the_ports_exist(
        tmp_path: Path) -> None:
    """The allowlist's lists are checked before any host is touched; it is loaded once the
    gateway and the exporters are configured, and before the handlers and the verify."""
    tasks = listed_tasks(two_host_inventory(tmp_path))
    preflight = index_of(tasks, "host_firewall : Refuse malformed client lists")
    driver = index_of(tasks, "nvidia_driver : ")
    assert preflight < driver
    load = index_of(tasks, "host_firewall : Load the allowlist")
    assert index_of(tasks, "engine_gateway : Configure the gateway") < load
    assert index_of(tasks, "gpu_metrics : Point node exporter") < load
    assert load < index_of(tasks, "vllm_server : Wait for each replica's /health", last=True)
    assert index_of(tasks, "host_firewall : Refuse an allowlist that would drop") < index_of(
        tasks, "host_firewall : Render the allowlist")
