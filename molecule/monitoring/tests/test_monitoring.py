"""Exporters and Prometheus, for real, on a test host."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest
import testinfra
from host_http import request_in_host  # noqa: E402

# The peer container is only a vantage point on the test network (see its tests below).
PEER = "monitoring-peer-debian12"


@pytest.fixture(scope="module")
def host() -> Any:
    """The monitored host only (testinfra would run each test on every container)."""
    return testinfra.get_host("podman://monitoring-debian12")


def _get(host: Any, url: str) -> Any:
    return json.loads(host.check_output(f"python3 -c \"import urllib.request,sys;"
                                        f"sys.stdout.write(urllib.request.urlopen('{url}')"
                                        f".read().decode())\""))


def _query(host: Any, expr: str, wait: float = 60) -> list[dict[str, Any]]:
    deadline = time.monotonic() + wait
    while True:
        data = _get(host, "http://127.0.0.1:9090/api/v1/query?query="
                    + expr.replace(" ", "%20").replace("\"", "%22").replace("{", "%7B")
                    .replace("}", "%7D"))
        result: list[dict[str, Any]] = data["data"]["result"]
        if result or time.monotonic() > deadline:
            return result
        time.sleep(2)


def test_services_are_running(host: Any) -> None:
    for unit in ("prometheus", "prometheus-node-exporter", "nvidia-vram-collector.timer"):
        assert host.service(unit).is_running or host.service(unit).is_enabled, unit
    assert host.service("prometheus").is_running
    assert host.service("prometheus-node-exporter").is_running


def test_collector_writes_the_textfile(host: Any) -> None:
    prom = host.file("/var/lib/prometheus/node-exporter/nvidia_vram.prom")
    assert prom.exists and prom.mode == 0o644
    assert 'nvidia_vram_collector_up{error=""} 1' in prom.content_string


def _address(host: Any) -> str:
    """The host's address on the test network (its inventory name, in its /etc/hosts)."""
    return str(host.check_output(
        "python3 -c 'import socket; print(socket.gethostbyname(socket.gethostname()))'"))


def test_node_exporter_serves_gpu_memory(host: Any) -> None:
    metrics = host.check_output("python3 -c \"import urllib.request;print(urllib.request"
                                f".urlopen('http://{_address(host)}:9100/metrics').read()"
                                ".decode())\"")
    assert "node_cpu_seconds_total" in metrics
    assert 'nvidia_gpu_memory_used_bytes{gpu="0"' in metrics


def test_collector_runs_unprivileged_and_sandboxed(host: Any) -> None:
    unit = "nvidia-vram-collector.service"
    user = host.run(f"systemctl show -p User --value {unit}").stdout.strip()
    assert user == "gpu-metrics"
    # The file the collector (not root) wrote on its last run.
    assert host.file("/var/lib/prometheus/node-exporter/nvidia_vram.prom").user == "gpu-metrics"
    result = host.run(f"systemctl start {unit}")  # a run now, under the sandbox, succeeds
    assert result.rc == 0, result.stderr
    assert host.run(f"systemctl show -p Result --value {unit}").stdout.strip() == "success"
    out = host.run(f"systemd-analyze security --no-pager {unit}").stdout
    level = re.search(r"Overall exposure level for \S+: ([0-9.]+)", out)
    assert level, out
    assert float(level.group(1)) <= 3.0, out


def test_prometheus_scrapes_gpu_memory_and_loaded_the_rules(host: Any) -> None:
    series = _query(host, 'nvidia_gpu_memory_used_bytes{gpu="1"}')
    assert series and float(series[0]["value"][1]) == 126398 * 1024 * 1024
    rules = _get(host, "http://127.0.0.1:9090/api/v1/rules")
    names = {r["name"] for g in rules["data"]["groups"] for r in g["rules"]}
    assert {"VllmPreemptionStorm", "VllmKvPoolNearFull", "VllmTtftHigh", "VllmTtftCritical",
            "VllmQueueBacklog", "VllmEngineDown", "GpuVramLeak", "GatewayDown", "NodeExporterDown",
            "TargetDown", "VllmEngineMetricsMissing", "VllmEngineTargetsAbsent"} <= names


def test_engine_down_fires_when_no_engine_answers(host: Any) -> None:
    # This host is in vllm_servers but runs no engine: the scrape fails and the alert fires.
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        alerts = _get(host, "http://127.0.0.1:9090/api/v1/alerts")["data"]["alerts"]
        firing = [a for a in alerts if a["labels"]["alertname"] == "VllmEngineDown"
                  and a["state"] == "firing"]
        if firing:
            return
        time.sleep(3)
    raise AssertionError(f"VllmEngineDown never fired: {alerts}")


def _posts(host: Any) -> list[dict[str, Any]]:
    text = host.run("cat /var/lib/webhook-received.jsonl 2>/dev/null").stdout
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _received(host: Any, alertname: str, path: str, wait: float = 120,
              after: int = 0) -> list[dict[str, Any]]:
    """Alerts named ALERTNAME (firing) the webhook receiver got on PATH in its posts after the
    first AFTER, polled until WAIT."""
    deadline = time.monotonic() + wait
    while True:
        posts = _posts(host)[after:]
        alerts = [a for p in posts if p["path"] == path for a in p["body"]["alerts"]
                  if a["labels"]["alertname"] == alertname and a["status"] == "firing"]
        if alerts or time.monotonic() > deadline:
            return alerts
        time.sleep(3)


def test_alertmanager_listens_on_loopback_only(host: Any) -> None:
    assert host.service("prometheus-alertmanager").is_running
    listening = host.run("ss -Hltn").stdout
    assert "127.0.0.1:9093" in listening
    assert ":9094" not in listening  # no cluster port
    config = host.file("/etc/prometheus/alertmanager.yml")
    assert config.mode == 0o640 and config.group == "prometheus"


def test_critical_alerts_page_through_alertmanager(host: Any) -> None:
    # No engine and no gateway run here: both critical alerts reach the page receiver.
    for name in ("VllmEngineDown", "GatewayDown"):
        alerts = _received(host, name, "/page")
        assert alerts, f"{name} never reached the webhook receiver's /page"
        assert alerts[0]["labels"]["severity"] == "critical"
        assert alerts[0]["labels"]["instance"]


def test_a_stopped_exporter_raises_a_ticket(host: Any) -> None:
    # Node exporter answers now: no NodeExporterDown is firing before the stop.
    assert _query(host, 'up{job="node"} == 1')
    before = len(_posts(host))
    host.run("systemctl stop prometheus-node-exporter")
    try:
        alerts = _received(host, "NodeExporterDown", "/ticket", after=before)
    finally:
        host.run("systemctl start prometheus-node-exporter")
    assert alerts, "NodeExporterDown never reached the webhook receiver's /ticket"
    assert alerts[0]["labels"]["job"] == "node"
    assert alerts[0]["labels"]["instance"].endswith(":9100")


def _listeners(host: Any, port: int) -> list[str]:
    return [line.split()[3] for line in host.run("ss -Hltn").stdout.splitlines()
            if line.split()[3].endswith(f":{port}")]


def test_exporter_listens_on_its_address_and_prometheus_on_loopback(host: Any) -> None:
    """gpu_metrics_listen_address (default the host's address, where Prometheus scrapes);
    Prometheus and Alertmanager on 127.0.0.1 (prometheus_server's defaults)."""
    assert _listeners(host, 9100) == [f"{_address(host)}:9100"]
    assert _listeners(host, 9090) == ["127.0.0.1:9090"]
    assert _listeners(host, 9093) == ["127.0.0.1:9093"]


def test_from_another_machine_only_node_exporter_answers(host: Any) -> None:
    peer = testinfra.get_host(f"podman://{PEER}")
    address = _address(host)
    status, body = request_in_host(peer, f"http://{address}:9100/metrics")
    assert status == 200 and "node_cpu_seconds_total" in body
    for port in (9090, 9093):
        status, body = request_in_host(peer, f"http://{address}:{port}/-/ready")
        assert status == 0 and "refused" in body, (port, status, body)


def test_a_site_prometheus_with_only_the_handed_files_scrapes_and_alerts() -> None:
    """Issue 37, item 3: prometheus_server_mode site on the peer wrote the rule file and the
    file_sd file; a plain Prometheus there, configured with nothing else, loaded the rules,
    scrapes the monitored host's targets (node exporter up) and evaluates the alerts
    (Watchdog firing; VllmEngineDown, as no engine runs on the monitored host)."""
    peer = testinfra.get_host(f"podman://{PEER}")
    site = "/etc/prometheus/vllm-fleet"
    for name in ("vllm_rules.yml", "vllm_targets.json", "scrape_config.yml"):
        assert peer.file(f"{site}/{name}").exists, name
    targets = json.loads(peer.file(f"{site}/vllm_targets.json").content_string)
    assert {g["labels"]["job"] for g in targets} >= {"vllm", "node", "gateway"}
    # The site mode installs no Alertmanager (the Prometheus there is the converge's own).
    assert not peer.package("prometheus-alertmanager").is_installed
    rules = _get(peer, "http://127.0.0.1:9090/api/v1/rules")
    names = {r["name"] for g in rules["data"]["groups"] for r in g["rules"]}
    assert {"Watchdog", "DiskSpaceLow", "DiskFillingUp", "VllmEngineDown",
            "NodeExporterDown"} <= names
    # VllmEngineDown holds for the role's default 2m before it fires.
    deadline = time.monotonic() + 180
    while True:
        active = _get(peer, "http://127.0.0.1:9090/api/v1/targets")["data"]["activeTargets"]
        up = {(t["labels"]["job"], t["health"]) for t in active}
        firing = {a["labels"]["alertname"] for a in
                  _get(peer, "http://127.0.0.1:9090/api/v1/alerts")["data"]["alerts"]
                  if a["state"] == "firing"}
        if (("node", "up") in up and {"Watchdog", "VllmEngineDown"} <= firing) \
                or time.monotonic() > deadline:
            break
        time.sleep(3)
    assert ("node", "up") in up, active
    # The labels the rules select on come from the file (job, host) and the scrape path.
    node = [t for t in active if t["labels"]["job"] == "node"]
    assert node[0]["labels"]["host"] == "monitoring-debian12"
    assert node[0]["scrapeUrl"].endswith(":9100/metrics")
    gateway = [t for t in active if t["labels"]["job"] == "gateway"]
    assert gateway and gateway[0]["scrapeUrl"].endswith("/health")
    assert {"Watchdog", "VllmEngineDown"} <= firing, firing
