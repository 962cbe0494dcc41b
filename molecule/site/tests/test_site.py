"""Testinfra checks of the site scenario: playbooks/site.yml on a bare host, then rebuild.yml."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import time
from pathlib import Path
from typing import Any

import yaml
from testinfra.host import Host

ROOT = Path(__file__).resolve().parents[3]

from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner import kv_plan  # noqa: E402
from host_http import request_in_host  # noqa: E402

LOCAL = ROOT / "inventories/local"
LOCK = yaml.safe_load((LOCAL / "models/tiny-qwen2.lock.yml").read_text())
CONFIG = json.loads((LOCAL / "models/tiny-qwen2/config.json").read_text())
# The engine group's variables, every file of the directory (as Ansible reads them: in name
# order, later files win): main.yml, cpu_engine.yml (the CPU engine), constraints.yml.
GROUP_VARS = {k: v for path in sorted((LOCAL / "group_vars/vllm_servers").glob("*.yml"))
              for k, v in (yaml.safe_load(path.read_text()) or {}).items()}
# The address replicas listen on (behind the gateway): the inventory's, else vllm_plan's default.
PLAN_HOST = GROUP_VARS.get("vllm_plan_host") or yaml.safe_load(
    (ROOT / "roles/vllm_plan/defaults/main.yml").read_text())["vllm_plan_host"]
MODEL_ROOT = "/srv/vllm/models/tiny-qwen2"
REPORTS = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent")) / "rebuild-reports"


def http(host: Host, url: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    status, text = request_in_host(host, url, body)
    try:
        return status, json.loads(text)
    except json.JSONDecodeError:
        return status, text


def test_no_gpu_mode_installed_no_driver_and_no_cuda(host: Host) -> None:
    packages = host.run("dpkg-query -W -f='${Package}\\n'").stdout.split()
    assert not [p for p in packages if p.startswith(("nvidia", "cuda", "libcuda"))]
    assert not host.file("/etc/modprobe.d/nvidia-driver-blacklist-nouveau.conf").exists


def test_every_stage_is_running(host: Host) -> None:
    for unit in ("vllm-0", "haproxy", "prometheus", "prometheus-node-exporter",
                 "nvidia-vram-collector.timer"):
        service = host.service(unit)
        assert service.is_enabled, unit
        assert service.is_running, unit
    assert host.file("/etc/cron.d/vllm-restart").contains("/usr/local/sbin/vllm-restart")


def test_live_model_is_the_locked_revision(host: Host) -> None:
    live = host.file(f"{MODEL_ROOT}/current")
    assert live.is_symlink and live.linked_to == f"{MODEL_ROOT}/{LOCK['commit']}"
    for entry in LOCK["files"]:
        assert host.file(f"{MODEL_ROOT}/current/{entry['path']}").sha256sum == entry["sha256"]


def test_engine_runs_the_plan_of_the_inventory(host: Host) -> None:
    options = dict(GROUP_VARS["vllm_plan_options"])
    # The inventory names the model once (model_artifacts_name); vllm_plan derives the path
    # and the served name from it.
    name = GROUP_VARS["model_artifacts_name"]
    plan = kv_plan(CONFIG, model=f"/srv/vllm/models/{name}/current",
                   served_model_name=name.lower(),
                   host=PLAN_HOST, port=GROUP_VARS["vllm_plan_base_port"], **options)
    script = host.file("/srv/vllm/bin/vllm-0.sh").content_string.split("exec \\\n", 1)[1]
    args = [shlex.split(line.removesuffix(" \\"))[0] for line in script.splitlines() if line]
    entrypoint = GROUP_VARS["vllm_server_entrypoint"]
    assert args[:len(entrypoint)] == entrypoint
    assert args[len(entrypoint):] == [str(a) for a in plan["argv"][2:]]
    log = host.run("journalctl -u vllm-0 --no-pager -o cat").stdout
    assert f"KV cache size: {plan['kv_pool_tokens']:,} tokens" in log


def normalized(name: str) -> str:
    """A distribution name as package indexes compare them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def test_engine_environment_is_the_pinned_uv_install(host: Host) -> None:
    """The role built the venv on this bare host with uv: exactly the inventory's pins (by
    name and version), none of the excluded packages, and compiled bytecode, which the
    engine's user could not write itself."""
    script = (
        "import importlib.metadata as m, json; "
        "print(json.dumps({d.metadata['Name']: [d.version, (d.read_text('INSTALLER') or '')"
        ".strip()] for d in m.distributions()}))")
    out = json.loads(host.check_output(f"/srv/vllm/venv/bin/python -c {shlex.quote(script)}"))
    installed = {normalized(name): found for name, found in out.items()}
    pins = yaml.safe_load((LOCAL / "group_vars/vllm_servers/constraints.yml").read_text())
    wanted = {normalized(name): version for name, version in
              (pin.split("==") for pin in pins["vllm_install_uv_constraints"])}
    engine = {name: version for name, (version, by) in installed.items() if by == "uv"}
    assert engine == wanted
    assert not {normalized(n) for n in GROUP_VARS["vllm_install_uv_remove"]} & set(installed)
    assert {by for _version, by in installed.values()} <= {"uv", "pip"}  # pip: the venv's own
    assert host.file("/srv/vllm/installer/bin/uv").exists
    counts = host.check_output(
        "cd /srv/vllm/venv/lib/python3.11/site-packages/vllm && "
        "find . -name '*.py' | wc -l && find . -name '*.cpython-311.pyc' | wc -l").split()
    assert int(counts[0]) > 1000 and counts[1] == counts[0], counts  # every module compiled


def test_gateway_answers_completions_and_chat(host: Host) -> None:
    status, body = http(host, "http://127.0.0.1:8080/v1/completions",
                        {"model": "tiny-qwen2", "prompt": "The KV cache", "max_tokens": 8})
    assert status == 200 and body["choices"][0]["text"], body
    status, body = http(host, "http://127.0.0.1:8080/v1/chat/completions",
                        {"model": "tiny-qwen2", "max_tokens": 8,
                         "messages": [{"role": "user", "content": "hello"}]})
    assert status == 200 and body["choices"][0]["message"]["content"] is not None, body


def test_prometheus_scrapes_the_engine_and_loaded_the_rules(host: Host) -> None:
    # Prometheus was reloaded by the rebuild just before: give each target a scrape or two.
    for _attempt in range(30):
        status, body = http(host, "http://127.0.0.1:9090/api/v1/targets")
        assert status == 200
        health = {t["labels"]["job"]: t["health"] for t in body["data"]["activeTargets"]}
        if set(health.values()) == {"up"}:
            break
        time.sleep(2)
    assert health.get("vllm") == "up" and health.get("node") == "up", health
    status, body = http(host, "http://127.0.0.1:9090/api/v1/rules")
    names = {r["name"] for g in body["data"]["groups"] for r in g["rules"]}
    assert {"VllmPreemptionStorm", "VllmEngineDown", "GpuVramLeak"} <= names, names


def test_rebuild_report_shows_an_identical_host() -> None:
    report_file = REPORTS / "site-debian12.json"
    report = json.loads(report_file.read_text())
    diff = report["diff"]
    assert diff["identical"] and not (diff["added"] or diff["removed"] or diff["changed"])
    after = report["after"]
    assert diff["same"] == len(after) == report["files"] > 10000  # the venv is in it
    for path in ("/etc/systemd/system/vllm-0.service", "/etc/vllm/vllm-0.env",
                 "/etc/haproxy/haproxy.cfg", "/etc/prometheus/rules/vllm.yml",
                 "/srv/vllm/bin/vllm-0.sh", "/srv/vllm/constraints.txt"):
        assert after[path].startswith("sha256:"), path
    for entry in LOCK["files"]:
        path = f"{MODEL_ROOT}/{LOCK['commit']}/{entry['path']}"
        assert after[path].split()[0] == f"sha256:{entry['sha256']}", path
    assert after[f"{MODEL_ROOT}/current"] == f"symlink:{LOCK['commit']}"


def test_rebuilt_files_match_the_report(host: Host) -> None:
    report_file = REPORTS / "site-debian12.json"
    after = json.loads(report_file.read_text())["after"]
    unit = "/etc/systemd/system/vllm-0.service"
    text = host.file(unit).content_string
    assert after[unit].split()[0] == "sha256:" + hashlib.sha256(text.encode()).hexdigest()
