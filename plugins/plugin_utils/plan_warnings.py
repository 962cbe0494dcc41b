"""What a deployment of the inventory will not do, said by the plan play: warnings, not refusals.

Issue 39, item 7. Two things an inventory can leave undone without any role failing:

- **No weekly restart** on a host planned with one replica. engine_restarts installs the
  cron job everywhere, but vllm-restart (vllm_server's one restart path) refuses a host's
  last serving replica (exit 3, logged): HAProxy would answer 503 meanwhile. So the weekly
  restart that keeps the slow VRAM leak (incident #5) in check never happens there, unless
  an upstream balancer covers the host (vllm_server_upstream_drain_command and _ready_command)
  or the inventory accepts the downtime (vllm_server_restart_downtime_reason). A host with
  engine_restarts_cron_enabled false has no weekly restart by choice: no warning.
- **Alerts that reach no one**: a Prometheus server whose Alertmanager routes a severity
  (prometheus_server_alertmanager_routes, or the default receiver) to a receiver with no
  webhook_urls, email_to or chat_webhook_urls (the role's defaults: page and ticket, both
  empty). With prometheus_server_alertmanager false the inventory chose Prometheus's
  /alerts page only: no warning. A route to an undefined receiver is the role's preflight's
  to refuse, not warned about here.

`values` maps variable names to the values a host's inventory gives (the plan_fleet action,
what=warnings, passes those of RESTART_VARIABLES / ALERT_VARIABLES that Ansible sees for the
host); an unset one takes its role's literal default (plugin_utils/role_data.py). No Ansible
import; tested in tests/unit/plugins/plugin_utils/test_plan_warnings.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.role_data import (
    ROLES_DIR,
    literal_defaults,
)

# The variables each warning reads, with the role that owns (and defaults) them.
RESTART_VARIABLES: dict[str, str] = {
    "engine_restarts_cron_enabled": "engine_restarts",
    "vllm_server_upstream_drain_command": "vllm_server",
    "vllm_server_restart_downtime_reason": "vllm_server",
}
ALERT_VARIABLES: dict[str, str] = {
    "prometheus_server_mode": "prometheus_server",
    "prometheus_server_alertmanager": "prometheus_server",
    "prometheus_server_alertmanager_receivers": "prometheus_server",
    "prometheus_server_alertmanager_routes": "prometheus_server",
    "prometheus_server_alertmanager_default_receiver": "prometheus_server",
}
# A receiver's destinations (roles/prometheus_server/templates/alertmanager.yml.j2).
DESTINATIONS = ("webhook_urls", "email_to", "chat_webhook_urls")
# Hosts a message names before it counts the rest.
NAMED = 10


def _bool(value: object) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "on", "1")
    return bool(value)


def _text(value: object) -> str:
    return str(value if value is not None else "").strip()


def _with_defaults(values: Mapping[str, Any], variables: Mapping[str, str],
                   roles_dir: str | Path) -> dict[str, Any]:
    defaults = literal_defaults(roles_dir, set(variables.values()))
    return {name: values.get(name, defaults.get(name)) for name in variables}


def _hosts(hosts: list[str]) -> str:
    if len(hosts) <= NAMED:
        return ", ".join(hosts)
    return f"{', '.join(hosts[:NAMED])} and {len(hosts) - NAMED} more"


def restart_refused(replicas: int, values: Mapping[str, Any],
                    roles_dir: str | Path = ROLES_DIR) -> bool:
    """Whether the weekly restart of a host with REPLICAS planned replicas is refused."""
    merged = _with_defaults(values, RESTART_VARIABLES, roles_dir)
    return (replicas == 1 and _bool(merged["engine_restarts_cron_enabled"])
            and not _text(merged["vllm_server_upstream_drain_command"])
            and not _text(merged["vllm_server_restart_downtime_reason"]))


def skipped_restarts(engines: Mapping[str, tuple[int, Mapping[str, Any]]],
                     roles_dir: str | Path = ROLES_DIR) -> list[str]:
    """One warning naming every engine host (host -> (planned replicas, values)) whose
    weekly restart will be refused; [] where there is none."""
    hosts = [host for host, (replicas, values) in engines.items()
             if restart_refused(replicas, values, roles_dir)]
    if not hosts:
        return []
    return [f"{_hosts(hosts)}: one replica, so no weekly restart. The cron job of"
            " engine_restarts runs vllm-restart, which refuses the last serving replica of a"
            " host (exit 3, in engine_restarts_log); a slow VRAM leak then grows until"
            " GpuVramLeak fires. Fix: plan a second replica on the host, or set"
            " vllm_server_upstream_drain_command and vllm_server_upstream_ready_command (an"
            " upstream balancer takes the host out), or vllm_server_restart_downtime_reason"
            " (the downtime of the restart accepted)."]


def silent_routes(values: Mapping[str, Any], roles_dir: str | Path = ROLES_DIR
                  ) -> dict[str, list[str]]:
    """Receiver -> what Alertmanager routes to it ('critical', 'warning', 'the default
    route'), for each defined receiver without a destination; {} where Alertmanager is off."""
    merged = _with_defaults(values, ALERT_VARIABLES, roles_dir)
    if (_text(merged["prometheus_server_mode"]) == "site"
            or not _bool(merged["prometheus_server_alertmanager"])):
        return {}
    receivers = merged["prometheus_server_alertmanager_receivers"] or {}
    routes = [(f"severity {severity}", _text(receiver)) for severity, receiver
              in (merged["prometheus_server_alertmanager_routes"] or {}).items()]
    routes.append(("the default route",
                   _text(merged["prometheus_server_alertmanager_default_receiver"])))
    silent: dict[str, list[str]] = {}
    for what, name in routes:
        if name not in receivers:
            continue
        spec = receivers[name]
        # The shorthands, or any of Alertmanager's own <kind>_configs passed through.
        if isinstance(spec, Mapping) and any(
                spec.get(kind) for kind in spec if kind in DESTINATIONS
                or str(kind).endswith("_configs")):
            continue
        silent.setdefault(name, []).append(what)
    return silent


def silent_alerts(servers: Mapping[str, Mapping[str, Any]],
                  roles_dir: str | Path = ROLES_DIR) -> list[str]:
    """One warning per Prometheus server (host -> values) whose Alertmanager routes alerts
    to receivers without a destination."""
    messages = []
    for host, values in servers.items():
        silent = silent_routes(values, roles_dir)
        if not silent:
            continue
        named = "; ".join(f"{name} ({', '.join(what)})" for name, what in silent.items())
        messages.append(
            f"{host}: the Alertmanager receivers {named} have no webhook_urls, email_to or"
            " chat_webhook_urls, so the alerts routed there go nowhere (only the /alerts page"
            " of Prometheus shows them). Fix: give each a destination in"
            " prometheus_server_alertmanager_receivers.")
    return messages
