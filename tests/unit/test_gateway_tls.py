"""engine_gateway's optional TLS: the preflight refuses half a pair and text that is not PEM
(never showing the key), accepts a real pair made by openssl; the client port's bind line
takes the PEM file, and HAProxy's global settings ask for TLS 1.2 or newer."""

from __future__ import annotations

import subprocess
from pathlib import Path

import jinja2
import pytest
import yaml
from _scripts import ansible_env
from test_plan_playbook import PLAYBOOK

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "engine_gateway"


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A self-signed certificate and its key, made by openssl."""
    tmp = tmp_path_factory.mktemp("tls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-days", "2", "-subj", "/CN=gw.test",
                    "-keyout", str(tmp / "key.pem"), "-out", str(tmp / "cert.pem")],
                   check=True, capture_output=True, timeout=60)
    return (tmp / "cert.pem").read_text(), (tmp / "key.pem").read_text()


def preflight(tmp: Path, **variables: str) -> subprocess.CompletedProcess[str]:
    play = [{"name": "preflight", "hosts": "localhost", "connection": "local",
             "gather_facts": False,
             "vars": {"ansible_python_interpreter": "{{ ansible_playbook_python }}",
                      "vllm_plan_replicas": [{"name": "vllm-0", "port": 8000}],
                      "vllm_server_api_key": "k"},
             "tasks": [{"name": "the role's preflight", "ansible.builtin.import_role":
                        {"name": "engine_gateway", "tasks_from": "preflight"}}]}]
    (tmp / "play.yml").write_text(yaml.safe_dump(play))
    (tmp / "vars.yml").write_text(yaml.safe_dump(variables))
    return subprocess.run([PLAYBOOK, "-i", "localhost,", str(tmp / "play.yml"),
                           "-e", f"@{tmp / 'vars.yml'}"], cwd=ROOT, env=ansible_env(),
                          capture_output=True, text=True, timeout=300, check=False)


def test_preflight_accepts_a_real_pair(tmp_path: Path, pair: tuple[str, str]) -> None:
    cert, key = pair
    result = preflight(tmp_path, engine_gateway_tls_certificate=cert,
                       engine_gateway_tls_key=key)
    assert result.returncode == 0, result.stdout[-3000:]


@pytest.mark.parametrize("case", ["certificate only", "key only", "certificate not PEM",
                                  "key not PEM", "encrypted key", "key as certificate"])
def test_preflight_refuses_half_a_pair_or_not_pem(tmp_path: Path, pair: tuple[str, str],
                                                  case: str) -> None:
    cert, key = pair
    encrypted = key.replace("BEGIN PRIVATE KEY", "BEGIN ENCRYPTED PRIVATE KEY").replace(
        "END PRIVATE KEY", "END ENCRYPTED PRIVATE KEY")
    variables = {
        "certificate only": {"engine_gateway_tls_certificate": cert},
        "key only": {"engine_gateway_tls_key": key},
        "certificate not PEM": {"engine_gateway_tls_certificate": "/etc/ssl/gw.crt",
                                "engine_gateway_tls_key": key},
        "key not PEM": {"engine_gateway_tls_certificate": cert,
                        "engine_gateway_tls_key": "/etc/ssl/private/gw.key"},
        "encrypted key": {"engine_gateway_tls_certificate": cert,
                          "engine_gateway_tls_key": encrypted},
        "key as certificate": {"engine_gateway_tls_certificate": key,
                               "engine_gateway_tls_key": key},
    }[case]
    result = preflight(tmp_path, **variables)
    out = result.stdout + result.stderr
    assert result.returncode != 0
    assert "Gateway TLS: engine_gateway_tls_certificate" in out and "Fix:" in out, out[-3000:]
    # The key's text is never shown.
    body = key.splitlines()[1]
    assert body not in out


def render(**overrides: object) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(ROLE / "templates"),
                             trim_blocks=True, undefined=jinja2.StrictUndefined)
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    values = {**defaults, **yaml.safe_load((ROLE / "vars" / "main.yml").read_text()),
              "engine_gateway_api_key": "", "engine_gateway_metrics_clients": [],
              "engine_gateway_replicas": [{"name": "vllm-0", "port": 8000,
                                           "plan": {"flags": {"max_num_seqs": 4}}}],
              "hostvars": {}, "ansible_managed": "Ansible managed", **overrides}
    return env.get_template("haproxy.cfg.j2").render(**values)


def test_client_port_is_https_only_with_a_certificate() -> None:
    plain = render(engine_gateway_tls_certificate="")
    assert "    bind 0.0.0.0:8080\n" in plain
    tls = render(engine_gateway_tls_certificate="-----BEGIN CERTIFICATE-----")
    assert "    bind 0.0.0.0:8080 ssl crt /etc/haproxy/vllm-gateway.pem\n" in tls
    assert "ssl-default-bind-options ssl-min-ver TLSv1.2" in tls
    # The metrics port stays plain HTTP (Prometheus servers only).
    assert "    bind 0.0.0.0:9180\n" in tls
