"""Every port one host will listen on, across all roles, and the clashes among them.

A replica planned on Prometheus's 9090 crash-loops while Prometheus scrapes itself as the
engine; a gateway port taken by a replica fails only after the engine restarted. The plan
play (playbooks/site.yml, playbooks/plan.yml: roles/vllm_plan/tasks/ports.yml) lists what
each role will bind on the host and refuses a clash before any host is touched:

    {{ vllm_plan_replicas | port_plan(values, roles_dir, prometheus_server=true) }}
    {{ listeners | port_clashes(inventory_hostname) }}   -> [] or one message per clash

(the filters in filter_plugins/port_plan.py; the plan_fleet action calls the same functions
from here).

`values` maps variable names to the values the inventory gives (the task passes every
variable of PORT_VARIABLES that Ansible sees); a variable it leaves unset takes its role's
literal default, read from roles/<role>/defaults/main.yml by plugin_utils/role_data.py (a
templated default is unknown there, so the variable stays unset). No Ansible import: the
logic is plain Python, tested in tests/unit/plugins/filter/test_port_plan.py, which also
fails when a role gains a `*_port`, `*_listen_address` or `*_bind_address` default that is
neither listed here (PORT_VARIABLES) nor ignored with a reason (IGNORED).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.role_data import (
    literal_defaults,
)

# Addresses that mean "every interface": they clash with any address on the same port.
WILDCARDS = frozenset({"", "*", "0.0.0.0", "::", "[::]"})
LOOPBACK_NAMES = {"localhost": "127.0.0.1", "[::1]": "::1"}


class PortPlanError(ValueError):
    """A port variable whose value is unusable; the message names it and the fix."""


@dataclass(frozen=True)
class Listener:
    """One socket a role will bind on the host."""

    port: int
    address: str  # "" = every interface
    variable: str  # the variable that sets the port (for a replica: the base port)
    what: str  # the service, in words
    role: str
    # How the variable is written: "port" (a number), "address" (host:port) or "base"
    # (replica N listens on the base port + N).
    kind: str = "port"
    offset: int = 0  # the replica's N, for kind "base"


# The variables each listener reads, with the role that owns (and defaults) them.
PORT_VARIABLES: dict[str, str] = {
    "vllm_plan_base_port": "vllm_plan",
    "vllm_plan_host": "vllm_plan",
    "engine_gateway_port": "engine_gateway",
    "engine_gateway_metrics_port": "engine_gateway",
    "engine_gateway_bind_address": "engine_gateway",
    "gpu_metrics_node_exporter_port": "gpu_metrics",
    "gpu_metrics_listen_address": "gpu_metrics",
    "gpu_metrics_dcgm_exporter": "gpu_metrics",
    "gpu_metrics_dcgm_exporter_port": "gpu_metrics",
    "prometheus_server_mode": "prometheus_server",
    "prometheus_server_listen_address": "prometheus_server",
    "prometheus_server_alertmanager": "prometheus_server",
    "prometheus_server_alertmanager_listen_address": "prometheus_server",
}

# Port and address variables that bind nothing on the host they are set for, and why.
IGNORED: dict[str, str] = {
    "host_firewall_ssh_port":
        "the port sshd already listens on, for the allowlist; no role binds it",
    "vllm_plan_group_master_port":
        "a multi-host engine group's rendezvous on its rank 0; site.yml deploys no group yet "
        "(it refuses them before any host changes), so nothing binds it",
}


def _port(value: object, variable: str, fix: str) -> int:
    text = str(value).strip()
    if isinstance(value, bool) or not text.isdigit() or not 0 < int(text) < 65536:
        raise PortPlanError(f"{variable} is {value!r}: not a port (1-65535). Fix: {fix}")
    return int(text)


def _host_port(value: object, variable: str) -> tuple[str, int]:
    """'host:port' (host may be empty, an IPv4 address, a name or [IPv6]) -> (host, port)."""
    text = str(value).strip()
    host, sep, port = text.rpartition(":")
    fix = 'write host:port, e.g. "0.0.0.0:9090" or "127.0.0.1:9093"'
    if not sep:
        raise PortPlanError(f"{variable} is {value!r}: no port. Fix: {fix}")
    return host, _port(port, variable, fix)


def _address(value: object) -> str:
    text = str(value if value is not None else "").strip()
    # An unset address (a templated role default, "{{ ansible_host ... }}", is unset here:
    # plugin_utils/role_data.py's rule) is counted as every interface, so a clash on that
    # port is still found.
    if text in WILDCARDS:
        return ""
    return LOOPBACK_NAMES.get(text, text)


def _bool(value: object) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "on", "1")
    return bool(value)


def port_plan(replicas: Iterable[Mapping[str, Any]], values: Mapping[str, Any],
              roles_dir: str | Path, prometheus_server: bool = False) -> list[dict[str, Any]]:
    """Every listener one host will have: its replicas (the plan), the gateway's client and
    metrics ports, node exporter, DCGM exporter where enabled, and on a Prometheus server
    Prometheus and Alertmanager. VALUES win over the roles' defaults."""
    known = {**literal_defaults(roles_dir, PORT_VARIABLES.values()),
             **{k: v for k, v in values.items() if k in PORT_VARIABLES}}

    def get(name: str) -> Any:
        return known.get(name)

    listeners: list[Listener] = []
    replica_address = _address(get("vllm_plan_host"))
    for replica in replicas:
        name = str(replica.get("name", "?"))
        port = _port(replica.get("port"), "vllm_plan_base_port",
                     "a port such as 8000 (replica N listens on the base port + N)")
        listeners.append(Listener(port, replica_address, "vllm_plan_base_port",
                                  f"vLLM replica {name}", "vllm_plan", "base",
                                  int(replica.get("index", 0) or 0)))
    gateway_address = _address(get("engine_gateway_bind_address"))
    listeners.append(Listener(
        _port(get("engine_gateway_port"), "engine_gateway_port", "a port such as 8080"),
        gateway_address, "engine_gateway_port", "the engine gateway (clients)",
        "engine_gateway"))
    listeners.append(Listener(
        _port(get("engine_gateway_metrics_port"), "engine_gateway_metrics_port",
              "a port such as 9180"),
        gateway_address, "engine_gateway_metrics_port", "the engine gateway (metrics)",
        "engine_gateway"))
    exporter_address = _address(get("gpu_metrics_listen_address"))
    listeners.append(Listener(
        _port(get("gpu_metrics_node_exporter_port"), "gpu_metrics_node_exporter_port",
              "a port such as 9100"),
        exporter_address, "gpu_metrics_node_exporter_port", "node exporter", "gpu_metrics"))
    if _bool(get("gpu_metrics_dcgm_exporter")):
        listeners.append(Listener(
            _port(get("gpu_metrics_dcgm_exporter_port"), "gpu_metrics_dcgm_exporter_port",
                  "a port such as 9400"),
            exporter_address, "gpu_metrics_dcgm_exporter_port", "DCGM exporter",
            "gpu_metrics"))
    # The site mode runs no Prometheus or Alertmanager of its own.
    if prometheus_server and str(get("prometheus_server_mode") or "self") != "site":
        host, port = _host_port(get("prometheus_server_listen_address"),
                                "prometheus_server_listen_address")
        listeners.append(Listener(port, _address(host), "prometheus_server_listen_address",
                                  "Prometheus", "prometheus_server", "address"))
        if _bool(get("prometheus_server_alertmanager")):
            host, port = _host_port(get("prometheus_server_alertmanager_listen_address"),
                                    "prometheus_server_alertmanager_listen_address")
            listeners.append(Listener(port, _address(host),
                                      "prometheus_server_alertmanager_listen_address",
                                      "Alertmanager", "prometheus_server", "address"))
    return [asdict(listener) for listener in listeners]


def _overlap(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return a["port"] == b["port"] and (
        not a["address"] or not b["address"] or a["address"] == b["address"])


def _where(listener: Mapping[str, Any]) -> str:
    return f"{listener['address'] or '*'}:{listener['port']}"


def _free_value(listener: Mapping[str, Any], listeners: list[Mapping[str, Any]]) -> str:
    """The nearest value above the current one for LISTENER's variable whose ports no other
    variable's listener on the host uses (for a replica's base port: all its replicas')."""
    own = [x for x in listeners if x["variable"] == listener["variable"]]
    others = {x["port"] for x in listeners if x["variable"] != listener["variable"]}
    base = listener["port"] - listener["offset"]
    offsets = [x["offset"] for x in own] if listener["kind"] == "base" else [0]
    candidate = base + 1
    while candidate + max(offsets) < 65536:
        if not any(candidate + offset in others for offset in offsets):
            break
        candidate += 1
    if listener["kind"] == "address":
        return f"{listener['address'] or '0.0.0.0'}:{candidate}"
    return str(candidate)


def port_clashes(listeners: list[Mapping[str, Any]], host: str) -> list[str]:
    """One message per pair of listeners of different variables on the same port (and
    overlapping addresses), naming both variables, the host and a free port for each."""
    messages: list[str] = []
    for i, first in enumerate(listeners):
        for second in listeners[i + 1:]:
            if first["variable"] == second["variable"] and first["kind"] == "base":
                continue  # replicas of one plan: vllm_server refuses duplicates itself
            if not _overlap(first, second):
                continue
            messages.append(
                f"{host}: {first['variable']} ({first['what']} on {_where(first)}) and "
                f"{second['variable']} ({second['what']} on {_where(second)}) both listen on "
                f"port {first['port']}. Fix: set {first['variable']} to "
                f"{_free_value(first, listeners)} or {second['variable']} to "
                f"{_free_value(second, listeners)} (free on {host}), in the inventory.")
    return messages
