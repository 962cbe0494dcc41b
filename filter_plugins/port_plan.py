"""The port_plan, port_clashes and port_plan_variables filters: every port one host will
listen on, across all roles, and the clashes among them.

    {{ vllm_plan_replicas | port_plan(values, roles_dir, prometheus_server=true) }}
    {{ listeners | port_clashes(inventory_hostname) }}   -> [] or one message per clash

A thin adapter: the logic lives in plugins/plugin_utils/port_plan.py, which the plan_fleet
action imports too (re-exported here for the filters' users).
"""

from __future__ import annotations

from typing import Any

from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.port_plan import (
    IGNORED,
    PORT_VARIABLES,
    Listener,
    PortPlanError,
    port_clashes,
    port_plan,
)
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.role_data import (
    literal_defaults,
)

__all__ = ["IGNORED", "PORT_VARIABLES", "Listener", "PortPlanError", "literal_defaults",
           "port_clashes", "port_plan", "FilterModule"]


class FilterModule:
    """port_plan and port_clashes."""

    def filters(self) -> dict[str, Any]:
        return {"port_plan": port_plan, "port_clashes": port_clashes,
                "port_plan_variables": lambda _: sorted(PORT_VARIABLES)}
