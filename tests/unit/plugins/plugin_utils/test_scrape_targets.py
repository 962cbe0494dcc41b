"""plugin_utils/scrape_targets.py: one job list for both modes of prometheus_server."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.scrape_targets import (
    file_sd_groups,
    scrape_jobs,
)


def two(host_vars: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{"name": "vllm-0", "port": 8000}, {"name": "vllm-1", "port": 8001}]


HOSTS: list[dict[str, Any]] = [
    {"inventory_hostname": "a", "ansible_host": "10.0.0.1"},
    {"inventory_hostname": "b", "gpu_metrics_listen_address": "fd00::2",
     "gpu_metrics_dcgm_exporter": True, "engine_gateway_tls_certificate": "PEM",
     "engine_gateway_metrics_port": 9181, "gpu_metrics_node_exporter_port": 9101}]


def test_jobs_read_each_hosts_own_ports_else_the_roles_defaults() -> None:
    jobs = {j["job_name"]: j for j in scrape_jobs(HOSTS, replicas=two,
                                                  alertmanager_target="127.0.0.1:9093")}
    assert list(jobs) == ["vllm", "node", "gateway", "haproxy", "alertmanager", "dcgm"]
    assert [(s["targets"], s["labels"]) for s in jobs["vllm"]["static_configs"]][:1] == [
        (["10.0.0.1:9180"], {"__metrics_path__": "/metrics/vllm-0", "instance": "10.0.0.1:8000",
                             "host": "a", "replica": "vllm-0"})]
    assert jobs["vllm"]["static_configs"][3]["targets"] == ["b:9181"]
    assert [s["targets"][0] for s in jobs["node"]["static_configs"]] == [
        "10.0.0.1:9100", "[fd00::2]:9101"]
    assert [s["targets"][0] for s in jobs["dcgm"]["static_configs"]] == ["[fd00::2]:9400"]
    assert [s["labels"] for s in jobs["gateway"]["static_configs"]] == [
        {"host": "a"}, {"host": "b", "__scheme__": "https"}]
    assert jobs["gateway"]["metrics_path"] == "/health"
    # HAProxy's own exporter, plain HTTP on each host's own metrics port (TLS is the API's).
    assert jobs["haproxy"]["metrics_path"] == "/metrics/haproxy"
    assert jobs["haproxy"]["static_configs"] == [
        {"targets": ["10.0.0.1:9180"], "labels": {"host": "a"}},
        {"targets": ["b:9181"], "labels": {"host": "b"}}]


def test_the_prometheus_hosts_own_gateway_exporter_is_read_on_loopback() -> None:
    jobs = {j["job_name"]: j for j in scrape_jobs(HOSTS, local_host="b", replicas=two)}
    assert [s["targets"] for s in jobs["haproxy"]["static_configs"]] == [
        ["10.0.0.1:9180"], ["127.0.0.1:9181"]]


def test_a_replica_of_the_prometheus_host_is_read_on_loopback() -> None:
    jobs = scrape_jobs(HOSTS[:1], local_host="a", replicas=two, scrape_gateway=False)
    assert [j["job_name"] for j in jobs] == ["vllm", "node"]
    assert jobs[0]["static_configs"][1] == {
        "targets": ["127.0.0.1:8001"],
        "labels": {"instance": "10.0.0.1:8001", "host": "a", "replica": "vllm-1"}}


def test_dcgm_off_as_text_is_off() -> None:
    jobs = scrape_jobs([{"inventory_hostname": "c", "gpu_metrics_dcgm_exporter": "false"}],
                       replicas=two)
    assert "dcgm" not in [j["job_name"] for j in jobs]


def test_file_sd_carries_the_job_and_metrics_path_as_labels() -> None:
    groups = file_sd_groups(scrape_jobs(HOSTS, replicas=two))
    assert groups[0] == {"targets": ["10.0.0.1:9180"], "labels": {
        "job": "vllm", "__metrics_path__": "/metrics/vllm-0", "instance": "10.0.0.1:8000",
        "host": "a", "replica": "vllm-0"}}
    gateway = [g for g in groups if g["labels"]["job"] == "gateway"]
    assert gateway[1]["labels"] == {"job": "gateway", "__metrics_path__": "/health",
                                    "host": "b", "__scheme__": "https"}
    assert {g["labels"]["job"] for g in groups} == {"vllm", "node", "gateway", "haproxy", "dcgm"}
