"""The allowlist from the network's side: each governed port of fw-gateway answers its own
clients only (others wait for a timeout), an ungoverned port answers everyone, the client
port speaks HTTPS only (verified against the converge's self-signed certificate), and with
the allowlist's unit stopped the ports answer again. Probes run inside each container."""

from __future__ import annotations

import json
from typing import Any

import pytest
import testinfra

GATEWAY, CLIENT, MONITOR, OUTSIDE = (f"fw-{n}-debian12"
                                     for n in ("gateway", "client", "monitor", "outside"))
KEY = "fw-test-key-not-a-secret"
CA = "/etc/fw-test-gateway.crt"

# Run inside a container: "tcp" -> open / refused / timeout; "https"/"http" -> status
# (0: no HTTP answer) and body.
_PROBE = r"""
import json, socket, ssl, sys, urllib.error, urllib.request
mode, ip, port, path, key, ca = sys.argv[1:7]
if mode == "tcp":
    s = socket.socket(); s.settimeout(3)
    try:
        s.connect((ip, int(port))); print(json.dumps("open"))
    except socket.timeout:
        print(json.dumps("timeout"))
    except ConnectionRefusedError:
        print(json.dumps("refused"))
    sys.exit(0)
req = urllib.request.Request(f"{mode}://{ip}:{port}{path}")
if key:
    req.add_header("Authorization", "Bearer " + key)
ctx = ssl.create_default_context(cafile=ca) if mode == "https" else None
try:
    with urllib.request.urlopen(req, timeout=5, context=ctx) as r:
        print(json.dumps([r.status, r.read().decode()]))
except urllib.error.HTTPError as e:
    print(json.dumps([e.code, e.read().decode()]))
except Exception as e:
    print(json.dumps([0, repr(e)]))
"""


def on(name: str) -> Any:
    return testinfra.get_host(f"podman://{name}")


@pytest.fixture(scope="module")
def host() -> Any:
    """The gateway host only (testinfra would run each test on every container)."""
    return on(GATEWAY)


def address(name: str) -> str:
    return str(on(name).check_output(
        "python3 -c 'import socket; print(socket.gethostbyname(socket.gethostname()))'"))


@pytest.fixture(scope="module")
def gateway_ip() -> str:
    return address(GATEWAY)


def probe(source: str, mode: str, ip: str, port: int, path: str = "", key: str = "",
          ca: str = CA) -> Any:
    out = on(source).run("python3 -c %s %s %s %s %s %s %s", _PROBE, mode, ip, str(port),
                         path, key, ca)
    assert out.rc == 0, out.stderr
    return json.loads(out.stdout)


def test_the_allowlist_is_its_own_table_loaded_by_its_unit(host: Any) -> None:
    assert host.service("vllm-allowlist.service").is_enabled
    assert host.run("systemctl is-active vllm-allowlist.service").stdout.strip() == "active"
    tables = host.check_output("nft list tables")
    assert "table inet vllm_allowlist" in tables
    # The host's other table survived every load (no `flush ruleset`).
    assert "table inet fw_test_other" in tables
    ruleset = host.file("/etc/nftables.d/vllm_allowlist.nft")
    assert ruleset.mode == 0o644 and ruleset.user == "root"


def test_client_gets_https_verified_against_the_certificate(gateway_ip: str) -> None:
    health = probe(CLIENT, "https", gateway_ip, 8080, "/health")
    assert health[0] == 200, health
    assert probe(CLIENT, "https", gateway_ip, 8080, "/v1/models")[0] == 401
    assert probe(CLIENT, "https", gateway_ip, 8080, "/v1/models", KEY) == [200, "v1/models ok\n"]
    # Plain HTTP on the TLS port gets no HTTP answer at all.
    status, error = probe(CLIENT, "http", gateway_ip, 8080, "/health")
    assert status == 0, error


def test_pem_file_is_root_haproxy_0640(host: Any) -> None:
    pem = host.file("/etc/haproxy/vllm-gateway.pem")
    assert pem.mode == 0o640 and pem.user == "root" and pem.group == "haproxy"
    assert "PRIVATE KEY" in pem.content_string and "CERTIFICATE" in pem.content_string


# (source, port) -> what a TCP connection gets. SSH has no server here: "refused" means the
# packet passed the allowlist (the host answered with a reset), "timeout" that it was dropped.
MATRIX = {
    (CLIENT, 8080): "open", (CLIENT, 22): "refused",
    (CLIENT, 9180): "timeout", (CLIENT, 9100): "timeout",
    (MONITOR, 9180): "open", (MONITOR, 9100): "refused", (MONITOR, 8080): "open",
    (MONITOR, 22): "timeout",
    (OUTSIDE, 8080): "timeout", (OUTSIDE, 9180): "timeout", (OUTSIDE, 9100): "timeout",
    (OUTSIDE, 22): "timeout",
    # A port the allowlist does not govern answers everyone.
    (OUTSIDE, 9999): "open", (CLIENT, 9999): "open",
}


@pytest.mark.parametrize(("source", "port"), sorted(MATRIX))
def test_each_port_admits_its_clients_only(gateway_ip: str, source: str, port: int) -> None:
    assert probe(source, "tcp", gateway_ip, port) == MATRIX[source, port]


def test_metrics_port_serves_the_monitor_only(gateway_ip: str) -> None:
    assert probe(MONITOR, "http", gateway_ip, 9180, "/metrics/vllm-0") == [200, "metrics ok\n"]
    assert probe(CLIENT, "http", gateway_ip, 9180, "/metrics/vllm-0")[0] == 0


def test_with_the_unit_stopped_the_ports_answer_again(host: Any, gateway_ip: str) -> None:
    assert host.run("systemctl stop vllm-allowlist.service").rc == 0
    try:
        assert "vllm_allowlist" not in host.check_output("nft list tables")
        assert "fw_test_other" in host.check_output("nft list tables")
        assert probe(OUTSIDE, "tcp", gateway_ip, 8080) == "open"
        assert probe(OUTSIDE, "tcp", gateway_ip, 22) == "refused"
    finally:
        assert host.run("systemctl start vllm-allowlist.service").rc == 0
    assert probe(OUTSIDE, "tcp", gateway_ip, 8080) == "timeout"


def test_restarting_debians_nftables_service_reloads_the_allowlist(
        host: Any, gateway_ip: str) -> None:
    """Debian's nftables.service flushes the whole ruleset; the allowlist is PartOf it."""
    try:
        result = host.run("systemctl restart nftables.service")
        assert result.rc == 0, result.stderr
        assert "table inet vllm_allowlist" in host.check_output("nft list tables")
        assert probe(OUTSIDE, "tcp", gateway_ip, 8080) == "timeout"
    finally:  # the flush took the test's other table too: back as the converge left it
        host.run("nft add table inet fw_test_other")
