"""The prometheus_scrape_jobs and prometheus_file_sd filters: what the fleet's Prometheus
scrapes, one job list for both modes of prometheus_server (a thin adapter, the logic lives in
plugins/plugin_utils/scrape_targets.py).

    {{ groups['vllm_servers'] | map('extract', hostvars) | list
       | prometheus_scrape_jobs(local_host=inventory_hostname,
                                alertmanager_target='127.0.0.1:9093') }}
    {{ jobs | prometheus_file_sd }}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.role_data import (
    RoleDefaultError,
)
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.scrape_targets import (
    file_sd_groups,
    scrape_jobs,
)


def prometheus_scrape_jobs(engine_hosts: object, local_host: str = "",
                           scrape_gateway: bool = True,
                           alertmanager_target: str = "") -> list[dict[str, Any]]:
    """The scrape_configs entries for the engine hosts' variables."""
    if isinstance(engine_hosts, Mapping | str) or not isinstance(engine_hosts, Sequence):
        raise AnsibleFilterError("prometheus_scrape_jobs: expected a list of host variables "
                                 f"(hostvars of each engine host), got {type(engine_hosts)}")
    try:
        return scrape_jobs(list(engine_hosts), local_host=str(local_host),
                           scrape_gateway=bool(scrape_gateway),
                           alertmanager_target=str(alertmanager_target or ""))
    except (KeyError, RoleDefaultError) as exc:
        raise AnsibleFilterError(f"prometheus_scrape_jobs: {exc}") from None


def prometheus_file_sd(jobs: object) -> list[dict[str, Any]]:
    """The jobs' targets as one Prometheus file_sd list."""
    if not isinstance(jobs, Sequence) or isinstance(jobs, str):
        raise AnsibleFilterError(f"prometheus_file_sd: expected a list of jobs, got {jobs!r}")
    return file_sd_groups(jobs)


class FilterModule:
    """prometheus_scrape_jobs and prometheus_file_sd."""

    def filters(self) -> dict[str, Any]:
        return {"prometheus_scrape_jobs": prometheus_scrape_jobs,
                "prometheus_file_sd": prometheus_file_sd}
