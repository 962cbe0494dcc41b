"""Grafana dashboards for the fleet's vLLM releases: a thin adapter, the generator lives in
plugins/plugin_utils/grafana_dashboards.py.

    {{ _prometheus_server_vllm_versions | grafana_dashboards }}
    -> {"vllm-fleet-engine.json": "<JSON text>", ...}
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.grafana_dashboards import (
    render,
)
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner import PlanError


def grafana_dashboards(versions: object) -> dict[str, str]:
    """File name -> JSON text of each dashboard, for the given vLLM releases (one or a list)."""
    if isinstance(versions, Mapping) or not isinstance(versions, str | Iterable):
        raise AnsibleFilterError(
            f"grafana_dashboards: expected a vLLM version or a list of them, got {versions!r}")
    try:
        return render(versions)
    except PlanError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    """grafana_dashboards."""

    def filters(self) -> dict[str, Any]:
        return {"grafana_dashboards": grafana_dashboards}
