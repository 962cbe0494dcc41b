"""Port clashes across the roles (issue 20, item 9): plugins/plugin_utils/port_plan.py lists every
port one host will listen on, and the plan play refuses two services on one port before any
host is touched (a replica on Prometheus's 9090 crash-looped while Prometheus scraped itself
as the engine)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from _scripts import ansible_env
from test_plan_playbook import PLAYBOOK

ROOT = Path(__file__).resolve().parents[4]
ROLES = ROOT / "roles"

from ansible_collections.vllm_fleet.serving.plugins.filter.port_plan import (  # noqa: E402
    IGNORED,
    PORT_VARIABLES,
    PortPlanError,
    port_clashes,
    port_plan,
)

CONFIG = ROOT / "inventories/example/models/Qwen2.5-72B-Instruct/config.json"
PORT_NAME = re.compile(r"_(port|listen_address|bind_address)$")


def replicas(*ports: int) -> list[dict[str, Any]]:
    return [{"index": i, "name": f"vllm-{i}", "port": port} for i, port in enumerate(ports)]


def where(listeners: list[dict[str, Any]]) -> dict[str, tuple[str, int]]:
    return {x["what"]: (x["address"], x["port"]) for x in listeners}


def test_every_port_default_of_every_role_is_listed_or_ignored() -> None:
    """A role that gains a port or listen address must be taught to port_plan (or ignored
    with a reason), or its clashes would go unseen again."""
    found = {}
    for defaults in sorted(ROLES.glob("*/defaults/main.yml")):
        for name in yaml.safe_load(defaults.read_text()) or {}:
            if PORT_NAME.search(name):
                found[name] = defaults.parts[-3]
    missing = sorted(set(found) - set(PORT_VARIABLES) - set(IGNORED))
    assert missing == [], f"teach plugins/plugin_utils/port_plan.py these variables: {missing}"
    assert {"vllm_plan_base_port", "engine_gateway_port", "engine_gateway_metrics_port",
            "gpu_metrics_node_exporter_port", "prometheus_server_listen_address",
            "prometheus_server_alertmanager_listen_address"} <= set(found)


def test_every_listed_variable_is_a_default_of_its_role() -> None:
    roles = sorted((p.name for p in ROLES.iterdir()), key=len, reverse=True)
    owners = {n: next(r for r in roles if n.startswith(r + "_")) for n in IGNORED}
    for name, role in {**PORT_VARIABLES, **owners}.items():
        defaults = yaml.safe_load((ROLES / role / "defaults/main.yml").read_text())
        assert name in defaults, (name, role)


def test_defaults_on_a_prometheus_server() -> None:
    listeners = port_plan(replicas(8000, 8001), {}, ROLES, prometheus_server=True)
    assert where(listeners) == {
        "vLLM replica vllm-0": ("127.0.0.1", 8000), "vLLM replica vllm-1": ("127.0.0.1", 8001),
        "the engine gateway (clients)": ("", 8080), "the engine gateway (metrics)": ("", 9180),
        "node exporter": ("", 9100), "Prometheus": ("127.0.0.1", 9090),
        "Alertmanager": ("127.0.0.1", 9093)}
    assert port_clashes(listeners, "h") == []


def test_engine_host_without_prometheus_and_dcgm_where_enabled() -> None:
    listeners = where(port_plan(replicas(8000), {"gpu_metrics_dcgm_exporter": True}, ROLES))
    assert "Prometheus" not in listeners and "Alertmanager" not in listeners
    assert listeners["DCGM exporter"] == ("", 9400)


def test_replica_on_prometheus_port_names_both_variables_the_host_and_free_ports() -> None:
    listeners = port_plan(replicas(9090), {"vllm_plan_base_port": 9090}, ROLES,
                          prometheus_server=True)
    assert port_clashes(listeners, "gpu-1") == [
        "gpu-1: vllm_plan_base_port (vLLM replica vllm-0 on 127.0.0.1:9090) and "
        "prometheus_server_listen_address (Prometheus on 127.0.0.1:9090) both listen on port "
        "9090. Fix: set vllm_plan_base_port to 9091 or prometheus_server_listen_address to "
        "127.0.0.1:9091 (free on gpu-1), in the inventory."]


def test_free_base_port_keeps_every_replica_clear() -> None:
    """Two replicas from 9099: 9100 is node exporter's, so the base moves past 9100."""
    listeners = port_plan(replicas(9099, 9100), {}, ROLES)
    [message] = port_clashes(listeners, "h")
    assert "vllm_plan_base_port (vLLM replica vllm-1 on 127.0.0.1:9100)" in message
    assert "gpu_metrics_node_exporter_port (node exporter on *:9100)" in message
    assert "set vllm_plan_base_port to 9101 or gpu_metrics_node_exporter_port to 9101" in message


def test_inventory_values_win_over_defaults() -> None:
    values = {"engine_gateway_port": 8081, "vllm_plan_host": "0.0.0.0",
              "prometheus_server_listen_address": "10.0.0.5:9100"}
    listeners = port_plan(replicas(8000), values, ROLES, prometheus_server=True)
    assert where(listeners)["the engine gateway (clients)"] == ("", 8081)
    assert where(listeners)["vLLM replica vllm-0"] == ("", 8000)
    assert port_clashes(listeners, "h") == [
        "h: gpu_metrics_node_exporter_port (node exporter on *:9100) and "
        "prometheus_server_listen_address (Prometheus on 10.0.0.5:9100) both listen on port "
        "9100. Fix: set gpu_metrics_node_exporter_port to 9101 or "
        "prometheus_server_listen_address to 10.0.0.5:9101 (free on h), in the inventory."]


def test_different_specific_addresses_do_not_clash() -> None:
    values = {"vllm_plan_host": "127.0.0.1", "engine_gateway_bind_address": "10.0.0.5",
              "engine_gateway_port": 8000}
    assert port_clashes(port_plan(replicas(8000), values, ROLES), "h") == []


@pytest.mark.parametrize(("values", "named"), [
    ({"engine_gateway_port": "http"}, "engine_gateway_port is 'http'"),
    ({"gpu_metrics_node_exporter_port": 70000}, "gpu_metrics_node_exporter_port is 70000"),
    ({"prometheus_server_listen_address": "0.0.0.0"}, "prometheus_server_listen_address"),
])
def test_unusable_value_is_named(values: dict[str, Any], named: str) -> None:
    with pytest.raises(PortPlanError, match=re.escape(named)):
        port_plan(replicas(8000), values, ROLES, prometheus_server=True)


def inventory(tmp: Path, **host_vars: Any) -> Path:
    """One engine host that is also the Prometheus server; it does not exist."""
    safe = {"gpu": "H200", "tensor_parallel_size": 2, "kv_cache_dtype": "fp8",
            "max_model_len": 32768}
    data = {"all": {"children": {
        "vllm_servers": {
            "hosts": {"gpu-1.invalid": host_vars},
            "vars": {"vllm_plan_model_config_file": str(CONFIG), "vllm_plan_gpu_count": 2,
                     "vllm_plan_options": safe, "vllm_plan_model": "/srv/vllm/models/q/current",
                     "vllm_plan_served_model_name": "q", "vllm_plan_show": False,
                     "vllm_server_api_key": "test-key-not-a-secret",
                     "ansible_connection": "ssh", "ansible_ssh_timeout": 2}},
        "prometheus_servers": {"hosts": {"gpu-1.invalid": None}}}}}
    path = tmp / "hosts.yml"
    path.write_text(yaml.safe_dump(data))
    return path


def run(playbook: str, hosts: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PLAYBOOK, "-i", str(hosts), str(ROOT / "playbooks" / playbook), *args], cwd=ROOT,
        env=ansible_env(), capture_output=True, text=True, timeout=300, check=False)


def test_site_refuses_a_replica_on_prometheus_port_before_any_host(tmp_path: Path) -> None:
    """The issue's finding: a replica port equal to Prometheus's 9090."""
    result = run("site.yml", inventory(tmp_path, vllm_plan_base_port=9090))
    out = result.stdout + result.stderr
    assert result.returncode != 0
    assert ("gpu-1.invalid: vllm_plan_base_port (vLLM replica vllm-0 on 127.0.0.1:9090) and "
            "prometheus_server_listen_address (Prometheus on 127.0.0.1:9090)") in out, out[-3000:]
    assert "Fix: set vllm_plan_base_port to 9091" in out
    assert "UNREACHABLE" not in out and "PLAY [Driver, CUDA, model, engine" not in out


def test_site_refuses_a_gateway_port_clash_before_any_host(tmp_path: Path) -> None:
    """The issue's finding: a gateway port clash, found only after the engine restarted."""
    result = run("site.yml", inventory(tmp_path, engine_gateway_metrics_port=9100))
    out = result.stdout + result.stderr
    assert result.returncode != 0
    assert ("engine_gateway_metrics_port (the engine gateway (metrics) on *:9100) and "
            "gpu_metrics_node_exporter_port (node exporter on *:9100)") in out, out[-3000:]
    assert "UNREACHABLE" not in out and "PLAY [Driver, CUDA, model, engine" not in out


def test_plan_playbook_refuses_a_clash_too(tmp_path: Path) -> None:
    hosts = inventory(tmp_path)
    assert run("plan.yml", hosts).returncode == 0
    result = run("plan.yml", hosts, "-e", "prometheus_server_alertmanager_listen_address="
                 "127.0.0.1:8000")
    out = result.stdout + result.stderr
    assert result.returncode != 0
    assert ("vllm_plan_base_port (vLLM replica vllm-0 on 127.0.0.1:8000) and "
            "prometheus_server_alertmanager_listen_address (Alertmanager on "
            "127.0.0.1:8000)") in out, out[-3000:]


def test_exporters_listen_where_gpu_metrics_listen_address_says() -> None:
    # Unset (the role's default is the host's own address, unknown on the control node):
    # counted as every interface, so a replica on loopback:9100 is refused.
    unset = port_plan(replicas(9100), {"vllm_plan_base_port": 9100}, ROLES)
    assert where(unset)["node exporter"] == ("", 9100)
    assert len(port_clashes(unset, "h")) == 1
    # Named: node exporter and DCGM exporter on 10.0.0.5 share no socket with loopback.
    named = port_plan(replicas(9100), {"vllm_plan_base_port": 9100,
                                       "gpu_metrics_listen_address": "10.0.0.5",
                                       "gpu_metrics_dcgm_exporter": True}, ROLES)
    assert where(named)["node exporter"] == ("10.0.0.5", 9100)
    assert where(named)["DCGM exporter"] == ("10.0.0.5", 9400)
    assert port_clashes(named, "h") == []
