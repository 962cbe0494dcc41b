"""What the fleet's Prometheus scrapes: one job list, read by both modes of prometheus_server.

    scrape_jobs(engine_hosts, local_host=..., scrape_gateway=..., alertmanager_target=...)
        -> the scrape_configs entries of prometheus.yml (self mode)
    file_sd_groups(jobs)
        -> the same targets and labels as one Prometheus file_sd list (site mode), each
           group carrying its job (and metrics path) as labels

ENGINE_HOSTS are the engine hosts' variables (``hostvars[host]`` of each host of
prometheus_server_engine_group, in inventory order). Each host's ports are its own
variables, else the producer role's literal default (role_data.role_default); its replicas
are its plan (the engine_replicas filter). Pure: no Ansible import here beyond the
collection's own helpers, tested in tests/unit/plugins/plugin_utils/test_scrape_targets.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.role_data import (
    ROLES_DIR,
    role_default,
)

# A wildcard listen address: the exporter is reached on the host's ansible_host.
WILDCARDS = ("", "0.0.0.0", "::", "[::]")

Job = dict[str, Any]
Replicas = Callable[[Mapping[str, Any]], list[dict[str, Any]]]


def _name(host_vars: Mapping[str, Any]) -> str:
    return str(host_vars["inventory_hostname"])


def _address(host_vars: Mapping[str, Any]) -> str:
    """The host's ansible_host, else its inventory name."""
    return str(host_vars.get("ansible_host") or _name(host_vars))


def _bracket(address: str) -> str:
    return f"[{address}]" if ":" in address and not address.startswith("[") else address


def _exporter_address(host_vars: Mapping[str, Any]) -> str:
    """Where the host's exporters listen: its gpu_metrics_listen_address where the inventory
    names one (a wildcard: its ansible_host), else its ansible_host, else its name."""
    listen = str(host_vars.get("gpu_metrics_listen_address") or "")
    return _bracket(listen if listen not in WILDCARDS else _address(host_vars))


def _port(host_vars: Mapping[str, Any], variable: str, roles_dir: str | Path) -> str:
    """The port HOST's own VARIABLE says (its variables, else the producer role's default)."""
    value = host_vars.get(variable)
    return str(value if value is not None else role_default(variable, roles_dir))


def _true(value: object) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "on", "1", "y")
    return bool(value)


def _default_replicas(host_vars: Mapping[str, Any]) -> list[dict[str, Any]]:
    from ansible_collections.vllm_fleet.serving.plugins.filter.kv_plan import (
        engine_replicas,
    )
    return engine_replicas(host_vars)


def scrape_jobs(engine_hosts: Sequence[Mapping[str, Any]], *, local_host: str = "",
                scrape_gateway: bool = True, alertmanager_target: str = "",
                roles_dir: str | Path = ROLES_DIR,
                replicas: Replicas | None = None) -> list[Job]:
    """The scrape jobs of the fleet: vllm (each replica), node, gateway and haproxy (where
    SCRAPE_GATEWAY: its /health, and HAProxy's own metrics), alertmanager (where
    ALERTMANAGER_TARGET) and dcgm (where a host runs DCGM exporter). A replica (and the
    gateway's exporter) on LOCAL_HOST, the Prometheus server's own host, is read on
    127.0.0.1; every other one through its host's gateway metrics port as
    /metrics/<replica> (the replica listens on 127.0.0.1 only). One instance label per
    replica, whichever way it is scraped."""
    replicas_of = replicas or _default_replicas
    vllm: list[dict[str, Any]] = []
    node: list[dict[str, Any]] = []
    gateway: list[dict[str, Any]] = []
    haproxy: list[dict[str, Any]] = []
    dcgm: list[dict[str, Any]] = []
    for hv in engine_hosts:
        host, address = _name(hv), _address(hv)
        metrics_port = _port(hv, 'engine_gateway_metrics_port', roles_dir)
        for replica in replicas_of(hv):
            labels: dict[str, str] = {}
            if host == local_host:
                target = f"127.0.0.1:{replica['port']}"
            else:
                target = f"{address}:{metrics_port}"
                labels["__metrics_path__"] = f"/metrics/{replica['name']}"
            labels.update(instance=f"{address}:{replica['port']}", host=host,
                          replica=str(replica["name"]))
            vllm.append({"targets": [target], "labels": labels})
        exporter = _exporter_address(hv)
        node.append({"targets": [
            f"{exporter}:{_port(hv, 'gpu_metrics_node_exporter_port', roles_dir)}"],
            "labels": {"host": host}})
        # A gateway with TLS (engine_gateway_tls_certificate) is read over HTTPS.
        gateway_labels = {"host": host}
        if str(hv.get("engine_gateway_tls_certificate") or ""):
            gateway_labels["__scheme__"] = "https"
        gateway.append({"targets": [f"{address}:{_port(hv, 'engine_gateway_port', roles_dir)}"],
                        "labels": gateway_labels})
        haproxy.append({"targets": [f"{'127.0.0.1' if host == local_host else address}:"
                                    f"{metrics_port}"], "labels": {"host": host}})
        if _true(hv.get("gpu_metrics_dcgm_exporter", False)):
            dcgm.append({"targets": [
                f"{exporter}:{_port(hv, 'gpu_metrics_dcgm_exporter_port', roles_dir)}"],
                "labels": {"host": host}})
    jobs: list[Job] = [{"job_name": "vllm", "static_configs": vllm},
                       {"job_name": "node", "static_configs": node}]
    if scrape_gateway:
        # HAProxy answers /health with 200 (an empty body: no samples) only while it runs
        # and a replica behind it is healthy; otherwise up == 0 (alert GatewayDown). Over
        # HTTPS without checking the certificate: this job only asks whether /health
        # answers (no key, no data).
        jobs.append({"job_name": "gateway", "metrics_path": "/health",
                     "tls_config": {"insecure_skip_verify": True}, "static_configs": gateway})
        # HAProxy's own exporter on the gateway's metrics port (the replicas' /metrics/<name>
        # beside it): its queue, its answers by status class, its sessions.
        jobs.append({"job_name": "haproxy", "metrics_path": "/metrics/haproxy",
                     "static_configs": haproxy})
    if alertmanager_target:
        jobs.append({"job_name": "alertmanager",
                     "static_configs": [{"targets": [alertmanager_target]}]})
    if dcgm:
        jobs.append({"job_name": "dcgm", "static_configs": dcgm})
    return jobs


def file_sd_groups(jobs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The targets of JOBS as one file_sd list: each group keeps its labels and gains the job
    (Prometheus keeps a target's own job label over the scrape job's name) and, where the
    job sets one, its metrics path. A job with no target is left out."""
    groups: list[dict[str, Any]] = []
    for job in jobs:
        for static in job.get("static_configs", []):
            labels = {"job": str(job["job_name"])}
            if "metrics_path" in job:
                labels["__metrics_path__"] = str(job["metrics_path"])
            labels.update({str(k): str(v) for k, v in (static.get("labels") or {}).items()})
            groups.append({"targets": [str(t) for t in static["targets"]], "labels": labels})
    return groups
