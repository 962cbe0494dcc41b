"""What the engine host exposes, seen from the host itself and from a second container on the
test network (the outside world): the gateway is the only public door, it checks the key
on every API path and answers nothing else; replicas and their worker sockets listen on
loopback only; /metrics is for the host itself and the Prometheus server only."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
from pathlib import Path
from typing import Any

FILES = Path(__file__).resolve().parents[1] / "files"
KEY = "molecule-operations-key"  # converge.yml's test value, not a secret
API = {"/v1/models", "/v1/completions", "/v1/chat/completions"}
REPLICAS = {"vllm-0": 8000, "vllm-1": 8001}
OUTSIDE_IMAGE = "localhost/testhost:debian12"


def _container(host: Any) -> str:
    return str(getattr(host.backend, "name", "operations-debian12"))


def _network(host: Any) -> tuple[str, str]:
    """The engine host's podman network and its address there."""
    out = subprocess.run(["podman", "inspect", _container(host)], capture_output=True,
                         text=True, check=True, timeout=60).stdout
    networks = json.loads(out)[0]["NetworkSettings"]["Networks"]
    name, settings = next(iter(networks.items()))
    return name, str(settings["IPAddress"])


def _copy(host: Any, name: str) -> str:
    path = f"/root/{name}"
    host.check_output(f"cat > {path} <<'EOF'\n{(FILES / name).read_text()}\nEOF")
    return path


def _matrix(lines: str) -> dict[tuple[str, str, str], int]:
    rows = [json.loads(line) for line in lines.splitlines() if line.startswith("{")]
    return {(r["base"], r["path"], r["key"]): int(r["status"]) for r in rows}


def _record(title: str, matrix: dict[tuple[str, str, str], int]) -> None:
    """Print the observed matrix (and append it to $ROUTE_MATRIX_OUT when set)."""
    text = [title] + [f"  {base}{path:<24} key={key or '-':<24} -> {status}"
                      for (base, path, key), status in sorted(matrix.items())]
    print("\n".join(text))
    if os.environ.get("ROUTE_MATRIX_OUT"):
        with open(os.environ["ROUTE_MATRIX_OUT"], "a") as out:
            out.write("\n".join(text) + "\n")


def test_from_a_second_container_only_the_gateway_answers_and_only_with_the_key(
        host: Any) -> None:
    network, address = _network(host)
    gateway, metrics = f"http://{address}:8080", f"http://{address}:9180"
    replicas = [f"http://{address}:{port}" for port in REPLICAS.values()]
    run = subprocess.run(
        ["podman", "run", "--rm", "--name", "operations-outside", "--network", network,
         "--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096", OUTSIDE_IMAGE,
         "python3", "-c", (FILES / "route_matrix.py").read_text(), KEY, gateway, metrics,
         *replicas],
        capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    matrix = _matrix(run.stdout)
    _record(f"from a second container on podman network {network}:", matrix)
    assert matrix
    for (base, path, key), status in matrix.items():
        if base in replicas:  # replicas listen on 127.0.0.1: no connection at all
            expected = 0
        elif base == metrics:  # the metrics port admits the host and Prometheus only
            expected = 403
        elif path == "/health":
            expected = 200
        elif path in API:
            expected = 200 if key == KEY else 401
        else:
            expected = 404
        assert status == expected, (base, path, key, status, expected)


def test_on_the_host_replicas_answer_on_loopback_and_metrics_come_through_the_gateway(
        host: Any) -> None:
    _podman_network, address = _network(host)
    script = _copy(host, "route_matrix.py")
    bases = ["http://127.0.0.1:8000", "http://127.0.0.1:9180", f"http://{address}:8000"]
    paths = "/health,/v1/models,/metrics,/metrics/vllm-0,/metrics/haproxy,/invocations"
    matrix = _matrix(host.check_output(f"python3 {script} {KEY} --paths {paths} "
                                       f"{' '.join(bases)}"))
    _record("from the engine host itself:", matrix)
    local, metrics, routable = bases
    for key in ("", "wrong-key", KEY):
        assert matrix[(local, "/health", key)] == 200
        assert matrix[(local, "/v1/models", key)] == (200 if key == KEY else 401)
        assert matrix[(metrics, "/metrics/vllm-0", key)] == 200
        assert matrix[(metrics, "/metrics", key)] == 404
        assert matrix[(metrics, "/metrics/haproxy", key)] == 200  # HAProxy's own exporter
    assert {status for (base, _path, _key), status in matrix.items() if base == routable} == {0}
    # The same series Prometheus reads on this host.
    body = host.check_output("python3 -c 'import urllib.request; print(urllib.request."
                             "urlopen(\"http://127.0.0.1:9180/metrics/vllm-1\").read().decode())'")
    assert "vllm:num_requests_running" in body
    gateway = host.check_output("python3 -c 'import urllib.request; print(urllib.request."
                                "urlopen(\"http://127.0.0.1:9180/metrics/haproxy\").read()"
                                ".decode())'")
    series = [line.split(" ")[0] for line in gateway.splitlines() if line[:1] != "#"]
    for family, labels in (("haproxy_backend_current_queue", ['proxy="vllm"']),
                           ("haproxy_backend_http_responses_total",
                            ['proxy="vllm"', 'code="5xx"']),
                           ("haproxy_frontend_current_sessions", ['proxy="vllm"'])):
        assert [s for s in series if s.startswith(family + "{")
                and all(label in s for label in labels)], (family, labels)


def test_no_engine_process_listens_beyond_loopback(host: Any) -> None:
    script = _copy(host, "listeners.py")
    sockets = [json.loads(line) for line in host.check_output(f"python3 {script}").splitlines()]
    print("\n".join(f"  {s['address']}:{s['port']} {s['unit'] or '-'} {s['command'][:60]}"
                    for s in sockets))
    engine = [s for s in sockets if s["unit"].removesuffix(".service") in REPLICAS]
    assert {(s["unit"], s["port"]) for s in engine} >= {
        (f"{name}.service", port) for name, port in REPLICAS.items()}
    beyond = [s for s in engine if not ipaddress.ip_address(s["address"]).is_loopback]
    assert not beyond, beyond


def test_gateway_config_holds_no_key_in_clear(host: Any) -> None:
    config = host.file("/etc/haproxy/haproxy.cfg")
    assert (config.user, config.group, config.mode) == ("root", "haproxy", 0o640)
    assert KEY not in config.content_string
    env = host.file("/etc/vllm/vllm-0.env").content_string.splitlines()
    for line in ("VLLM_HOST_IP=127.0.0.1", "GLOO_SOCKET_IFNAME=lo", "NCCL_SOCKET_IFNAME=lo"):
        assert line in env, line
