"""Issue 39, item 7: what a deployment will not do, warned of at plan time (no refusal)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.plan_warnings import (
    ALERT_VARIABLES,
    RESTART_VARIABLES,
    restart_refused,
    silent_alerts,
    silent_routes,
    skipped_restarts,
)
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.role_data import (
    role_defaults_file,
)

ROOT = Path(__file__).resolve().parents[4]


@pytest.mark.parametrize("variables", [RESTART_VARIABLES, ALERT_VARIABLES])
def test_each_variable_read_is_a_literal_default_of_its_role(variables: dict[str, str]) -> None:
    """A renamed variable fails here, not silently as an unset one."""
    for name, role in variables.items():
        assert name in role_defaults_file(ROOT / "roles" / role), (name, role)


@pytest.mark.parametrize(("replicas", "values", "refused"), [
    (1, {}, True),  # the roles' defaults: cron on, no upstream balancer, no accepted downtime
    (2, {}, False),
    (1, {"vllm_server_restart_downtime_reason": "a lab host"}, False),
    (1, {"vllm_server_upstream_drain_command": "lb-drain h1"}, False),
    (1, {"vllm_server_restart_downtime_reason": "  "}, True),
    (1, {"engine_restarts_cron_enabled": False}, False),
    (1, {"engine_restarts_cron_enabled": "false"}, False),
])
def test_the_weekly_restart_of_a_one_replica_host_is_refused_unless_covered(
        replicas: int, values: dict[str, Any], refused: bool) -> None:
    assert restart_refused(replicas, values) is refused


def test_one_warning_names_every_one_replica_host_and_the_fixes() -> None:
    engines: dict[str, tuple[int, dict[str, Any]]] = {
        "h200-a": (1, {}), "h100-a": (2, {}), "h200-b": (1, {}),
        "lab": (1, {"vllm_server_restart_downtime_reason": "lab"})}
    [message] = skipped_restarts(engines)
    assert message.startswith("h200-a, h200-b: one replica, so no weekly restart.")
    for fix in ("a second replica", "vllm_server_upstream_drain_command",
                "vllm_server_upstream_ready_command", "vllm_server_restart_downtime_reason"):
        assert fix in message
    assert skipped_restarts({"h100-a": (2, {})}) == []
    many = skipped_restarts({f"h{i:02d}": (1, {}) for i in range(25)})[0]
    assert many.startswith("h00, h01, h02, h03, h04, h05, h06, h07, h08, h09 and 15 more: ")


HOOK = {"webhook_urls": ["http://pager.example/hook"]}


@pytest.mark.parametrize(("values", "silent"), [
    # The role's defaults: page and ticket, both empty.
    ({}, {"page": ["severity critical"], "ticket": ["severity warning", "the default route"]}),
    ({"prometheus_server_alertmanager_receivers": {"page": HOOK, "ticket": {"email_to": ["a@b"]}}},
     {}),
    ({"prometheus_server_alertmanager_receivers": {"page": HOOK, "ticket": {"email_to": []}}},
     {"ticket": ["severity warning", "the default route"]}),
    ({"prometheus_server_alertmanager_receivers": {"page": HOOK, "ticket": HOOK},
      "prometheus_server_alertmanager_routes": {"critical": "page", "warning": "page"},
      "prometheus_server_alertmanager_default_receiver": "nobody"}, {}),
    # A receiver that is not a mapping has no destination (the role's preflight refuses it).
    ({"prometheus_server_alertmanager_receivers": {"page": HOOK, "ticket": "x"}},
     {"ticket": ["severity warning", "the default route"]}),
    # Alertmanager off: the inventory chose the /alerts page only.
    ({"prometheus_server_alertmanager": False}, {}),
    ({"prometheus_server_alertmanager": "false"}, {}),
])
def test_receivers_without_a_destination_are_named_with_what_routes_to_them(
        values: dict[str, Any], silent: dict[str, list[str]]) -> None:
    assert silent_routes(values) == silent


def test_one_warning_per_prometheus_server_whose_alerts_go_nowhere() -> None:
    messages = silent_alerts({
        "monitor": {},
        "quiet": {"prometheus_server_alertmanager_receivers": {"page": HOOK, "ticket": HOOK}}})
    assert messages == [
        "monitor: the Alertmanager receivers page (severity critical); ticket (severity warning,"
        " the default route) have no webhook_urls, email_to or chat_webhook_urls, so the alerts"
        " routed there go nowhere (only the /alerts page of Prometheus shows them). Fix: give"
        " each a destination in prometheus_server_alertmanager_receivers."]
