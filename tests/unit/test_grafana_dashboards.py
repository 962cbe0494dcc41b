"""The Grafana dashboards (plugins/plugin_utils/grafana_dashboards.py): every query parses
(promtool), reads only metrics the recorded releases export, shows every replica of a fleet
on several releases once, and the JSON is a Grafana dashboard; the role writes them
idempotently; scripts/dashboard-check.py against a fake Prometheus."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from _scripts import ansible_env, load_script
from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.serving.plugins.filter.grafana_dashboards import (
    grafana_dashboards,
)
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils import grafana_dashboards as gd
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner import (
    metric_names,
    parse_version,
)

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None and os.environ.get("CI") != "true",
                                    reason="promtool is installed by scripts/setup.sh")
checker = load_script("scripts/dashboard-check.py", "dashboard_check")

# The releases whose /metrics were recorded from their wheels (scripts/vllm-release.py).
RECORDED = {path.stem.removeprefix("vllm-"): path
            for path in sorted((ROOT / "tests/data/releases").glob("vllm-*.json"))}
# Releases on either side of every rename the table knows (V0 gauge, 0.8 V1 counters, 0.10
# KV and prefix-cache names, 0.11 inter-token latency), beside the recorded ones.
OLD = ("0.6.2", "0.9.2", "0.10.0", "0.11.0")
FLEETS = [(v,) for v in (*OLD, *RECORDED)] + [("0.6.2", "0.33.0"), ("0.32.0", "0.34.0"),
                                              (*OLD, *RECORDED)]


def exported(version: str) -> set[str]:
    """The metric names release VERSION exports, as recorded (counters with _total)."""
    facts = json.loads(RECORDED[version].read_text())
    return {m["exported"] for m in facts["oracle"]["metrics"].values()}


def vllm_families(families: tuple[str, ...]) -> set[str]:
    return {f for f in families if f.startswith("vllm:")}


def all_queries(fleet: tuple[str, ...]) -> Iterator[tuple[gd.Dashboard, gd.Panel, gd.Query]]:
    for dashboard in gd.dashboards(fleet):
        for panel in dashboard.panels:
            for query in panel.queries:
                yield dashboard, panel, query


def as_sent(expr: str) -> str:
    """The query as the checker sends it (Grafana's variables replaced)."""
    return checker.substitute(expr, {"host": ".*", "instance": ".*"}, "5m")


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL, "promtool missing: run scripts/setup.sh"
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120,
                          check=False)


# ------------------------------------------------------------------------------ the queries


@needs_promtool
@pytest.mark.parametrize("fleet", FLEETS, ids="+".join)
def test_every_panel_query_passes_promtool(fleet: tuple[str, ...], tmp_path: Path) -> None:
    """Each query, its variables replaced, as a recording rule: promtool parses them all."""
    rules = []
    for dashboard in map(gd.dashboard_json, gd.dashboards(fleet)):
        for panel in dashboard["panels"]:
            for target in panel.get("targets", []):
                rules.append({"record": f"dashboard:{dashboard['uid'].replace('-', '_')}:"
                                        f"panel_{panel['id']}_{target['refId']}",
                              "expr": as_sent(target["expr"])})
    assert len(rules) > 30
    assert not [r for r in rules if "$" in r["expr"]]
    (tmp_path / "panels.yml").write_text(
        yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}, width=1000))
    result = promtool("check", "rules", str(tmp_path / "panels.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(rules)} rules found" in result.stdout


@pytest.mark.parametrize("version", sorted(RECORDED))
def test_a_release_s_panels_read_only_metrics_it_exports(version: str) -> None:
    """Dashboards for one recorded release read nothing its /metrics lacks."""
    missing = {(panel.title, f) for _d, panel, query in all_queries((version,))
               for f in vllm_families(query.families) - exported(version)}
    assert missing == set()


@pytest.mark.parametrize("version", sorted(RECORDED))
def test_a_mixed_fleet_s_queries_each_read_a_name_every_release_exports(version: str) -> None:
    """Dashboards for every release at once: each vLLM query has a variant (an operand of its
    `or`) whose metrics all exist in each recorded release."""
    fleet = (*OLD, *RECORDED)
    names = exported(version)
    blind = [(panel.title, query.legend) for _d, panel, query in all_queries(fleet)
             if vllm_families(query.families)
             and not any(vllm_families(v.families) <= names for v in query.variants)]
    assert blind == []


@pytest.mark.parametrize("fleet", [("0.6.2", "0.33.0"), ("0.9.2", "0.34.0"), (*OLD, *RECORDED)],
                         ids="+".join)
def test_a_mixed_fleet_s_query_holds_each_release_s_own(fleet: tuple[str, ...]) -> None:
    """Every query of a fleet's dashboards carries the query each of its releases would get
    alone, the newest release's first: no replica is left without its names."""
    mixed = list(all_queries(fleet))
    newest = max(fleet, key=parse_version)
    for version in fleet:
        alone = list(all_queries((version,)))
        assert len(alone) == len(mixed)
        for (_d, _p, query), (_d2, _p2, own) in zip(mixed, alone, strict=True):
            assert set(own.variants) <= set(query.variants), (query.expr, version)
    for (_d, _p, query), (_d2, _p2, own) in zip(mixed, all_queries((newest,)), strict=True):
        assert query.variants[0] == own.variants[0]


def test_renamed_metrics_are_read_by_both_names() -> None:
    engine = gd.dashboards(("0.6.2", "0.33.0"))[0]
    exprs = {panel.title: panel.queries[0].expr for panel in engine.panels}
    kv = exprs["KV cache usage"]
    assert kv.index("vllm:kv_cache_usage_perc") < kv.index("vllm:gpu_cache_usage_perc")
    assert " or " in kv
    assert {"vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"} <= set(
        re.findall(r"vllm:[a-z_]+(?=_bucket)", exprs["Inter-token latency"]))
    assert "vllm:gpu_prefix_cache_hit_rate" in exprs["Prefix cache hit rate"]
    # One release, one name: no `or`.
    single = gd.dashboards(("0.33.0",))[0]
    assert not [p.title for p in single.panels if " or " in p.queries[0].expr]


def test_the_names_are_the_rules_table() -> None:
    """The dashboards read vLLM through metric_names only: every vLLM name a panel reads for
    a release is one of that release's table, the table the alert rules are written from."""
    for version in (*OLD, *RECORDED):
        table = set(metric_names(parse_version(version)).values())
        used = {f for _d, _p, query in all_queries((version,))
                for f in vllm_families(query.families)}
        assert used and used <= table, (version, used - table)


def metric_names_in(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (each is followed by its matchers)."""
    return {re.sub(r"_bucket$", "", name)
            for name in re.findall(r"([A-Za-z_:][A-Za-z0-9_:]*)\{", expr)}


@pytest.mark.parametrize("fleet", FLEETS, ids="+".join)
def test_each_variant_records_the_families_it_reads(fleet: tuple[str, ...]) -> None:
    for _d, panel, query in all_queries(fleet):
        for variant in query.variants:
            assert metric_names_in(variant.expr) == set(variant.families), panel.title


def test_the_gpu_panels_use_the_rules_names() -> None:
    """Every DCGM field and VRAM collector metric an alert reads has a panel, spelt alike."""
    rules = (ROOT / "roles/prometheus_server/templates/vllm_rules.yml.j2").read_text()
    alerting = set(re.findall(r"\b(DCGM_FI_DEV_[A-Z_]+|nvidia_[a-z_]+)(?:\{job=|\[)", rules))
    gpu = next(d for d in gd.dashboards(("0.33.0",)) if d.uid == "vllm-fleet-gpu")
    read = {f for panel in gpu.panels for f in panel.families}
    assert alerting and alerting <= read, alerting - read
    faults = (ROOT / "tests/promtool/gpu_faults.test.yml").read_text()
    assert set(re.findall(r"\bDCGM_FI_DEV_[A-Z_]+", faults)) <= read


def test_the_gateway_panels_that_need_its_metrics_endpoint_are_listed() -> None:
    """The panels that read HAProxy's exporter name it: the gateway serves it on its metrics
    port and Prometheus scrapes it there (job haproxy); the /health one reads job gateway."""
    haproxy = (ROOT / "roles/engine_gateway/templates/haproxy.cfg.j2").read_text()
    assert "http-request use-service prometheus-exporter if { path /metrics/haproxy }" in haproxy
    # The scrape jobs' one source (prometheus.yml.j2 and the site mode's file_sd render it).
    jobs = (ROOT / "plugins/plugin_utils/scrape_targets.py").read_text()
    assert re.search(r'"job_name": "gateway",\s+"metrics_path": "/health"', jobs), jobs
    assert re.search(r'"job_name": "haproxy",\s+"metrics_path": "/metrics/haproxy"', jobs), jobs
    assert gd.panels_requiring(gd.GATEWAY_METRICS, ("0.33.0",)) == [
        "vLLM fleet / Gateway / Requests queued in the gateway",
        "vLLM fleet / Gateway / 5xx responses per second",
        "vLLM fleet / Gateway / Client sessions"]
    gateway = next(d for d in gd.dashboards(("0.33.0",)) if d.uid == "vllm-fleet-gateway")
    reads = {f for panel in gateway.panels if panel.requires for f in panel.families}
    assert reads == {"haproxy_backend_current_queue", "haproxy_backend_http_responses_total",
                     "haproxy_frontend_current_sessions"}
    assert 'code="5xx"' in gateway.panels[2].queries[0].expr


# ------------------------------------------------------------ a fleet on several releases


@needs_promtool
def test_a_fleet_mid_upgrade_shows_every_replica_once(tmp_path: Path) -> None:
    """promtool evaluates the panels' queries over replicas on different releases: each
    replica appears once, a replica inside vLLM's deprecation window (old and new names at
    once) by its new name alone: neither summed with nor maxed over the old one, as a
    {__name__=~"new|old"} selector would."""
    engine = gd.dashboards(("0.6.2", "0.9.2", "0.33.0"))[0]
    exprs = {panel.title: as_sent(panel.queries[0].expr) for panel in engine.panels}

    def series(name: str, instance: str, values: str) -> dict[str, str]:
        return {"series": f'{name}{{job="vllm", instance="{instance}", host="h"}}',
                "values": values}

    def sample(instance: str, value: float) -> dict[str, Any]:
        return {"labels": f'{{job="vllm", instance="{instance}"}}', "value": value}

    test = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                series("vllm:kv_cache_usage_perc", "new:8000", "0.5x20"),
                series("vllm:gpu_cache_usage_perc", "old:8000", "0.25x20"),
                series("vllm:kv_cache_usage_perc", "both:8000", "0.75x20"),
                # (the old name's values differ here only to show which name is read)
                series("vllm:gpu_cache_usage_perc", "both:8000", "0.9x20"),
                # hits/queries: 30/60 per minute (new), 15/60 (0.9's gpu_ counters)
                series("vllm:prefix_cache_hits_total", "new:8000", "0+30x20"),
                series("vllm:prefix_cache_queries_total", "new:8000", "0+60x20"),
                series("vllm:gpu_prefix_cache_hits_total", "mid:8000", "0+15x20"),
                series("vllm:gpu_prefix_cache_queries_total", "mid:8000", "0+60x20"),
                series("vllm:gpu_prefix_cache_hit_rate", "old:8000", "0.1x20"),
                series("vllm:prefix_cache_hits_total", "both:8000", "0+30x20"),
                series("vllm:prefix_cache_queries_total", "both:8000", "0+60x20"),
                series("vllm:gpu_prefix_cache_hits_total", "both:8000", "0+15x20"),
                series("vllm:gpu_prefix_cache_queries_total", "both:8000", "0+60x20"),
                series("vllm:generation_tokens_total", "new:8000", "0+600x20"),
                series("vllm:generation_tokens_total", "old:8000", "0+60x20"),
            ],
            "promql_expr_test": [
                {"expr": exprs["KV cache usage"], "eval_time": "10m",
                 "exp_samples": [sample("new:8000", 0.5), sample("old:8000", 0.25),
                                 sample("both:8000", 0.75)]},
                {"expr": exprs["Prefix cache hit rate"], "eval_time": "10m",
                 "exp_samples": [sample("new:8000", 0.5), sample("mid:8000", 0.25),
                                 sample("old:8000", 0.1), sample("both:8000", 0.5)]},
                {"expr": exprs["Generation tokens per second"], "eval_time": "10m",
                 "exp_samples": [sample("new:8000", 10), sample("old:8000", 1)]},
            ],
        }],
    }
    (tmp_path / "mixed.test.yml").write_text(yaml.safe_dump(test, width=1000))
    result = promtool("test", "rules", str(tmp_path / "mixed.test.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


# ---------------------------------------------------------------------------- Grafana JSON


def rects_overlap(a: dict[str, int], b: dict[str, int]) -> bool:
    return (a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"]
            and a["y"] < b["y"] + b["h"] and b["y"] < a["y"] + a["h"])


@pytest.mark.parametrize("fleet", [("0.33.0",), ("0.6.2", "0.34.0")], ids="+".join)
def test_the_json_is_a_grafana_dashboard(fleet: tuple[str, ...]) -> None:
    rendered = gd.render(fleet)
    assert sorted(rendered) == ["vllm-fleet-engine.json", "vllm-fleet-gateway.json",
                                "vllm-fleet-gpu.json", "vllm-fleet-host.json"]
    uids = set()
    for name, text in rendered.items():
        dashboard = json.loads(text)
        assert dashboard["uid"] == name.removesuffix(".json") and dashboard["uid"] not in uids
        uids.add(dashboard["uid"])
        assert dashboard["title"] and dashboard["schemaVersion"] >= 39
        assert "vllm-fleet" in dashboard["tags"]
        variables = {v["name"]: v for v in dashboard["templating"]["list"]}
        assert variables["datasource"]["type"] == "datasource"
        assert variables["datasource"]["query"] == "prometheus"
        panels = dashboard["panels"]
        ids = [p["id"] for p in panels]
        assert len(ids) == len(set(ids)) and all(isinstance(i, int) for i in ids)
        for panel in panels:
            grid = panel["gridPos"]
            assert {"h", "w", "x", "y"} <= set(grid) and grid["x"] + grid["w"] <= 24
            assert all(isinstance(grid[k], int) and grid[k] >= 0 for k in "hwxy")
            if panel["type"] == "row":
                continue
            assert panel["type"] in ("timeseries", "stat")
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert panel["targets"] and panel["vllmFleet"]["families"]
            assert set(panel["vllmFleet"]["requires"]) <= set(gd.REQUIREMENTS)
            refs = [t["refId"] for t in panel["targets"]]
            assert len(refs) == len(set(refs))
            for target in panel["targets"]:
                assert target["datasource"] == panel["datasource"]
                used = set(re.findall(r"\$(\w+)", target["expr"])) - {"__rate_interval"}
                assert used <= set(variables), used
                # Every variable is a regex matcher, so its "All" (.*) matches every series.
                assert len(re.findall(r'=~"\$\w+"', target["expr"])) == len(
                    re.findall(r"\$(?!__)\w+", target["expr"]))
        for n, a in enumerate(panels):
            for b in panels[n + 1:]:
                assert not rects_overlap(a["gridPos"], b["gridPos"]), (a["title"], b["title"])
        for variable in variables.values():
            if variable["type"] == "query":
                assert variable["datasource"]["uid"] == "${datasource}"
                assert variable["allValue"] == ".*" and variable["includeAll"]


def test_the_render_is_stable_and_names_the_releases() -> None:
    once = gd.render(["0.34.0", "0.32.0", "0.32"])
    assert once == gd.render(("0.32.0", "0.34.0"))
    engine = json.loads(once["vllm-fleet-engine.json"])
    assert "vLLM 0.34.0, 0.32.0" in engine["description"]
    assert all(text.endswith("}\n") for text in once.values())


def test_the_filter_takes_one_release_or_a_list() -> None:
    assert grafana_dashboards("0.33.0") == gd.render(["0.33.0"])
    assert grafana_dashboards(["0.33.0", "0.6.2"]) == gd.render(["0.6.2", "0.33.0"])
    with pytest.raises(AnsibleFilterError, match="cannot parse vLLM version"):
        grafana_dashboards(["zero"])
    with pytest.raises(AnsibleFilterError, match="no vLLM release"):
        grafana_dashboards([])
    with pytest.raises(AnsibleFilterError, match="expected a vLLM version"):
        grafana_dashboards({"version": "0.33.0"})


# ------------------------------------------------------------------------------- the role


def test_the_role_writes_the_dashboards_and_a_rerun_changes_nothing(tmp_path: Path) -> None:
    """roles/prometheus_server/tasks/dashboards.yml, run on the control node into a scratch
    directory with the role's defaults and vars: the files are the generator's bytes (Grafana's
    {{instance}} legends untouched by Ansible), and the second run reports nothing changed."""
    play = tmp_path / "play.yml"
    play.write_text(yaml.safe_dump([{
        "name": "Dashboards", "hosts": "localhost", "connection": "local",
        "gather_facts": False,
        "vars_files": [str(ROOT / "roles/prometheus_server/defaults/main.yml"),
                       str(ROOT / "roles/prometheus_server/vars/main.yml")],
        "tasks": [{"name": "The role's dashboard tasks", "ansible.builtin.import_tasks":
                   str(ROOT / "roles/prometheus_server/tasks/dashboards.yml")}]}]))
    out = tmp_path / "dashboards"
    host_vars = tmp_path / "hosts.yml"
    host_vars.write_text(yaml.safe_dump({"all": {"hosts": {
        "h200-a.gpu.example.internal": {"vllm_install_version": "0.6.2"}}}}))

    def run() -> str:
        result = subprocess.run(
            [str(BIN / "ansible-playbook"), "-i", str(ROOT / "inventories/example"),
             "-i", str(host_vars), str(play), "-e", f"prometheus_server_dashboards_dir={out}"],
            cwd=ROOT, env=ansible_env(), capture_output=True, text=True, timeout=300,
            check=False)
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    first = run()
    assert re.search(r"localhost\s*: ok=\d+\s+changed=[1-9]", first), first
    # The example inventory pins 0.33.0; one host stays on 0.6.2.
    expected = gd.render(["0.6.2", "0.33.0"])
    assert sorted(p.name for p in out.iterdir()) == sorted(expected)
    for name, text in expected.items():
        assert (out / name).read_text() == text
        assert oct((out / name).stat().st_mode & 0o777) == "0o644"
    second = run()
    assert re.search(r"localhost\s*: ok=\d+\s+changed=0 ", second), second


# ------------------------------------------------------------------- dashboard-check.py


Answer = Callable[[str], tuple[int, dict[str, Any]]]


def cpu_host(query: str) -> tuple[int, dict[str, Any]]:
    """A fake Prometheus scraping a CPU engine host: no DCGM, no GPU, no HAProxy exporter."""
    if "bad_query(" in query:
        return 400, {"status": "error", "errorType": "bad_data", "error": "parse error"}
    if re.search(r"DCGM_|nvidia_gpu_|haproxy_", query):
        return 200, {"status": "success", "data": {"resultType": "vector", "result": []}}
    return 200, {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"instance": "h:8000"}, "value": [0, "1"]}]}}


@pytest.fixture
def prometheus() -> Iterator[tuple[str, list[str], list[Answer]]]:
    """A fake Prometheus HTTP API in a thread: its URL, the queries it got, and the function
    that answers them (replace answer[0] to change it)."""
    received: list[str] = []
    answer: list[Answer] = [cpu_host]

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            url = urllib.parse.urlsplit(self.path)
            if url.path != "/api/v1/query":
                self.send_error(404)
                return
            query = urllib.parse.parse_qs(url.query)["query"][0]
            received.append(query)
            status, body = answer[0](query)
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", received, answer
    server.shutdown()
    server.server_close()


@pytest.fixture
def dashboards_dir(tmp_path: Path) -> Path:
    for name, text in gd.render(["0.33.0"]).items():
        (tmp_path / name).write_text(text)
    return tmp_path


def run_check(url: str, path: Path, allow: tuple[str, ...] = (),
              allow_panels: tuple[str, ...] = ()) -> tuple[int, str]:
    out = io.StringIO()
    rc = checker.check(url, checker.load_dashboards([path]), allow=allow,
                       allow_panels=allow_panels, out=out)
    return rc, out.getvalue()


def test_the_check_names_each_query_without_series(
        prometheus: tuple[str, list[str], list[Answer]], dashboards_dir: Path) -> None:
    url, received, _answer = prometheus
    rc, out = run_check(url, dashboards_dir)
    assert rc == 1
    assert "vLLM fleet / GPUs / GPU utilization / A: no series (needs dcgm-exporter)" in out
    assert ("vLLM fleet / Gateway / Client sessions / A: no series "
            "(needs gateway-metrics-endpoint)") in out
    assert "Engine" not in out and "Hosts" not in out
    # Every query went out with Grafana's variables replaced.
    assert len(received) == sum(len(checker.panel_queries(json.loads(p.read_text())))
                                for p in dashboards_dir.glob("*.json"))
    assert not [q for q in received if "$" in q]
    assert any('instance=~".*"' in q and "[5m]" in q for q in received)


def test_the_allowlist_excuses_the_gpu_and_gateway_panels(
        prometheus: tuple[str, list[str], list[Answer]], dashboards_dir: Path) -> None:
    url, _received, _answer = prometheus
    rc, out = run_check(url, dashboards_dir, allow=("gpu",))
    assert rc == 1 and "GPUs" not in out and "Client sessions" in out
    rc, out = run_check(url, dashboards_dir, allow=("gpu",),
                        allow_panels=("Requests queued*", "5xx*", "Client sessions"))
    assert rc == 0, out
    # The command line: one file and a directory, both requirements allowed.
    assert checker.main(["--prometheus", url, "--allow", "gpu", "--allow",
                         "gateway-metrics-endpoint", str(dashboards_dir / "vllm-fleet-gpu.json"),
                         str(dashboards_dir)]) == 0
    assert checker.main(["--prometheus", url, str(dashboards_dir / "vllm-fleet-gpu.json")]) == 1


def test_a_refused_query_fails_even_when_allowed(
        prometheus: tuple[str, list[str], list[Answer]], tmp_path: Path) -> None:
    url, _received, _answer = prometheus
    dashboard = {"title": "Broken", "templating": {"list": []}, "panels": [
        {"id": 1, "title": "GPU thing", "vllmFleet": {"requires": ["nvidia-gpu"]},
         "targets": [{"refId": "A", "expr": "bad_query(DCGM_FI_DEV_GPU_UTIL{})"}]},
        {"id": 2, "title": "Unknown variable",
         "targets": [{"refId": "A", "expr": 'up{job=~"$nope"}'}]}]}
    out = io.StringIO()
    rc = checker.check(url, [dashboard], allow=["gpu"], out=out)
    assert rc == 1
    assert "Broken / GPU thing / A: bad_data: parse error" in out.getvalue()
    # An undefined variable is sent as written (the fake answers it; Prometheus would refuse).
    assert checker.substitute('up{job=~"$nope"}', {}, "5m") == 'up{job=~"$nope"}'
    assert checker.substitute("rate(x[$__rate_interval]) ${host} [[host]]",
                              {"host": "a|b"}, "2m") == "rate(x[2m]) a|b a|b"


def test_an_unreachable_prometheus_fails(dashboards_dir: Path) -> None:
    out = io.StringIO()
    dashboards = checker.load_dashboards([dashboards_dir])
    rc = checker.check("http://127.0.0.1:9", dashboards, allow=["gpu"], out=out, timeout=2)
    assert rc == 1 and "no answer from http://127.0.0.1:9" in out.getvalue()


def test_every_series_present_passes(prometheus: tuple[str, list[str], list[Answer]],
                                     dashboards_dir: Path) -> None:
    url, _received, answer = prometheus
    vector = {"resultType": "vector", "result": [{"metric": {}}]}
    answer[0] = lambda q: (200, {"status": "success", "data": vector})
    out = io.StringIO()
    assert checker.check(url, checker.load_dashboards([dashboards_dir]), out=out) == 0
    assert "0 empty but allowed" in out.getvalue()
