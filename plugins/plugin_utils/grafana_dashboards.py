"""Grafana dashboards for the fleet, generated from the metric names the alert rules read.

vLLM renames metrics (vllm:gpu_cache_usage_perc became vllm:kv_cache_usage_perc in 0.10,
vllm:time_per_output_token_seconds became vllm:inter_token_latency_seconds in 0.11), and a
dashboard written against one release shows "No data" on the next. The alert rules follow the
release each engine host runs through one table, vllm_planner.metric_names(version); the
dashboards are generated from the same table, for every release of the fleet at once:

    {{ _prometheus_server_vllm_versions | vllm_fleet.serving.grafana_dashboards }}
    -> {"vllm-fleet-engine.json": "<JSON text>", "vllm-fleet-gateway.json": ..., ...}

A fleet on several releases (half on 0.32.0, half on 0.34.0 mid-upgrade): each vLLM query is
written once per distinct naming among the releases, each written the way one release names
its metrics and aggregated to the same labels (job, instance), and the variants are joined
with PromQL's `or`, the newest release's first: ``(A) or (B)`` keeps every replica of A and
adds the replicas that only B answers for. So a replica shows data whichever release it runs,
and a release inside vLLM's deprecation window, which exports the old and the new name at
once, is counted once (by its new name), not twice as a ``{__name__=~"a|b"}`` sum would.

Every panel records the metric families its queries read (Panel.families; in the JSON under
the panel's "vllmFleet" key, with what it requires beyond the default deployment), so the
tests can hold each panel to the releases' recorded /metrics (tests/data/releases) and
scripts/dashboard-check.py can tell a GPU panel a CPU host leaves empty from a broken one.

No Ansible import: plain typed Python (the filter filter_plugins/grafana_dashboards.py is the
adapter), tested in tests/unit/test_grafana_dashboards.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner.errors import (
    PlanError,
)
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner.versions import (
    Version,
    metric_names,
    parse_version,
)

# Grafana 11's dashboard schema (older Grafanas refuse nothing here; newer ones migrate it).
SCHEMA_VERSION = 39
# Every panel and query reads the data source the dashboard's `datasource` variable picks.
DATASOURCE: dict[str, str] = {"type": "prometheus", "uid": "${datasource}"}
TAG = "vllm-fleet"
# Grafana's rate window: four scrape intervals at least, so rate() always has two samples.
RATE = "$__rate_interval"
QUANTILES = (0.5, 0.95, 0.99)

# What a panel needs beyond what the roles deploy by default. scripts/dashboard-check.py
# --allow NAME lets the panels that need NAME come back empty (a CPU test host has no GPU).
DCGM = "dcgm-exporter"
DCGM_EXTRA = "dcgm-extra-counters"
NVIDIA_GPU = "nvidia-gpu"
GATEWAY_METRICS = "gateway-metrics-endpoint"
REQUIREMENTS: dict[str, str] = {
    DCGM: "DCGM exporter on the host (gpu_metrics_dcgm_exporter: true, job dcgm)",
    DCGM_EXTRA: "a field that is not in DCGM exporter's default counters: its counters file "
                "must name it (as for the matching alert rules)",
    NVIDIA_GPU: "an NVIDIA GPU that nvidia-smi answers for (the VRAM collector, job node)",
    GATEWAY_METRICS: "HAProxy's Prometheus exporter on the gateway (engine_gateway serves it "
                     "as GET /metrics/haproxy on its metrics port), scraped by Prometheus "
                     "(prometheus_server_scrape_gateway: job haproxy)",
}


@dataclass(frozen=True)
class Variant:
    """One way of writing a query: its PromQL and the metric families it reads (counters by
    their exported name, ..._total; histograms by their family name, read as _bucket)."""

    expr: str
    families: tuple[str, ...]


@dataclass(frozen=True)
class Query:
    """A panel's query: its variants (one per naming among the fleet's releases, newest
    first), joined with `or`."""

    legend: str
    variants: tuple[Variant, ...]

    @property
    def expr(self) -> str:
        if len(self.variants) == 1:
            return self.variants[0].expr
        return " or ".join(f"({variant.expr})" for variant in self.variants)

    @property
    def families(self) -> tuple[str, ...]:
        return tuple(sorted({f for variant in self.variants for f in variant.families}))


@dataclass(frozen=True)
class Panel:
    title: str
    description: str
    queries: tuple[Query, ...]
    unit: str = "short"
    kind: str = "timeseries"  # or "stat"
    requires: tuple[str, ...] = ()
    max_value: float | None = None

    @property
    def families(self) -> tuple[str, ...]:
        return tuple(sorted({f for query in self.queries for f in query.families}))


@dataclass(frozen=True)
class Variable:
    """A query variable of the dashboard (multi-valued, "All" matching everything)."""

    name: str
    label: str
    query: str


@dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    description: str
    variables: tuple[Variable, ...]
    rows: tuple[tuple[str, tuple[Panel, ...]], ...]
    tags: tuple[str, ...] = ()

    @property
    def filename(self) -> str:
        return f"{self.uid}.json"

    @property
    def panels(self) -> tuple[Panel, ...]:
        return tuple(panel for _title, panels in self.rows for panel in panels)


# ----------------------------------------------------------------------------- the releases


def releases(versions: Iterable[object]) -> tuple[Version, ...]:
    """The distinct releases of VERSIONS (release numbers as the inventory writes them),
    newest first. Raises PlanError for an unparsable one or an empty list."""
    listed = [versions] if isinstance(versions, str) else list(versions)
    parsed = sorted({parse_version(v) for v in listed}, reverse=True)
    if not parsed:
        raise PlanError("vllm_install_version", "no vLLM release to write the dashboards for",
                        "put the engine hosts in prometheus_server_engine_group")
    return tuple(parsed)


def label(version: Version) -> str:
    return ".".join(map(str, version))


def per_release(fleet: tuple[Version, ...],
                build: Callable[[Mapping[str, str]], Variant | None]) -> tuple[Variant, ...]:
    """BUILD applied to each release's metric names (newest first), each distinct variant
    once. A release BUILD has no variant for (None) adds none."""
    out: list[Variant] = []
    for version in fleet:
        variant = build(metric_names(version))
        if variant is not None and variant not in out:
            out.append(variant)
    if not out:
        raise PlanError("vllm_install_version",
                        f"no release of {', '.join(map(label, fleet))} exports the metrics "
                        "of a dashboard panel", "check the release numbers")
    return tuple(out)


# ------------------------------------------------------------------------------- selectors


def selector(*matchers: str) -> str:
    return "{" + ", ".join(matchers) + "}"


ENGINE = selector('job="vllm"', 'host=~"$host"', 'instance=~"$instance"')
NODE = selector('job="node"', 'host=~"$host"')
DCGM_SERIES = selector('job="dcgm"', 'host=~"$host"')
# HAProxy's exporter, whichever job scrapes it: the gateway's proxy is called vllm.
HAPROXY = selector('proxy="vllm"', 'host=~"$host"')
HAPROXY_5XX = selector('proxy="vllm"', 'host=~"$host"', 'code="5xx"')
BY = "job, instance"


def _gauge(role: str, how: str = "sum") -> Callable[[Mapping[str, str]], Variant | None]:
    def build(names: Mapping[str, str]) -> Variant | None:
        name = names.get(role)
        return Variant(f"{how} by ({BY}) ({name}{ENGINE})", (name,)) if name else None
    return build


def _rate(role: str) -> Callable[[Mapping[str, str]], Variant | None]:
    def build(names: Mapping[str, str]) -> Variant | None:
        name = names.get(role)
        return (Variant(f"sum by ({BY}) (rate({name}{ENGINE}[{RATE}]))", (name,))
                if name else None)
    return build


def _quantile(role: str, q: float) -> Callable[[Mapping[str, str]], Variant | None]:
    def build(names: Mapping[str, str]) -> Variant | None:
        name = names.get(role)
        if not name:
            return None
        return Variant(f"histogram_quantile({q}, sum by ({BY}, le) "
                       f"(rate({name}_bucket{ENGINE}[{RATE}])))", (name,))
    return build


def _prefix_hit_rate(names: Mapping[str, str]) -> Variant | None:
    hits, queries = names.get("prefix_cache_hits"), names.get("prefix_cache_queries")
    if hits and queries:
        return Variant(f"sum by ({BY}) (rate({hits}{ENGINE}[{RATE}])) / "
                       f"sum by ({BY}) (rate({queries}{ENGINE}[{RATE}]))", (hits, queries))
    gauge = names.get("prefix_cache_hit_rate")  # the V0 engine's own gauge
    return Variant(f"max by ({BY}) ({gauge}{ENGINE})", (gauge,)) if gauge else None


def _plain(expr: str, *families: str) -> tuple[Variant, ...]:
    return (Variant(expr, families),)


# ------------------------------------------------------------------------------ dashboards


def _latency(fleet: tuple[Version, ...], role: str, title: str, what: str) -> Panel:
    return Panel(
        title=title,
        description=f"p50, p95 and p99 of {what} per replica: histogram_quantile over the "
                    "rate of the histogram's buckets (not _sum/_count, an average since start).",
        queries=tuple(Query(f"p{round(q * 100)} {{{{instance}}}}",
                            per_release(fleet, _quantile(role, q))) for q in QUANTILES),
        unit="s")


def engine(fleet: tuple[Version, ...]) -> Dashboard:
    def single(legend: str, build: Callable[[Mapping[str, str]], Variant | None]
               ) -> tuple[Query, ...]:
        return (Query(legend, per_release(fleet, build)),)

    load = (
        Panel("Replicas up", "Prometheus's scrape of each replica (1: answering).",
              (Query("{{instance}}", _plain(f"up{ENGINE}", "up")),), kind="stat"),
        Panel("Requests running", "Requests in the engine's running batch, per replica.",
              single("{{instance}}", _gauge("requests_running"))),
        Panel("Requests waiting", "Requests in the engine's scheduler queue, per replica "
              "(alert VllmQueueBacklog).", single("{{instance}}", _gauge("requests_waiting"))),
        Panel("KV cache usage", "Share of the KV pool's blocks in use, per replica "
              "(alert VllmKvPoolNearFull).",
              single("{{instance}}", _gauge("kv_cache_usage", "max")), unit="percentunit",
              max_value=1),
        Panel("Preemptions per second", "Requests preempted for KV space, per replica "
              "(alert VllmPreemptionStorm).", single("{{instance}}", _rate("preemptions")),
              unit="ops"),
    )
    latency = (
        _latency(fleet, "ttft", "Time to first token", "the time to first token"),
        _latency(fleet, "inter_token_latency", "Inter-token latency",
                 "the time between two output tokens of a request"),
        _latency(fleet, "e2e_latency", "End-to-end request latency",
                 "the whole request's latency"),
    )
    throughput = (
        Panel("Generation tokens per second", "Output tokens per second, per replica.",
              single("{{instance}}", _rate("generation_tokens"))),
        Panel("Prompt tokens per second", "Prefill (prompt) tokens per second, per replica.",
              single("{{instance}}", _rate("prompt_tokens"))),
        Panel("Prefix cache hit rate", "Share of the prompt blocks looked up in the prefix "
              "cache that were found (the V0 engine's own hit-rate gauge before 0.8).",
              single("{{instance}}", _prefix_hit_rate), unit="percentunit", max_value=1),
    )
    return Dashboard(
        uid="vllm-fleet-engine",
        title="vLLM fleet / Engine",
        description=f"Every vLLM replica (job vllm), for vLLM {', '.join(map(label, fleet))}. "
                    "Generated by vllm_fleet.serving (prometheus_server) from the metric "
                    "names of those releases: do not edit, regenerate.",
        variables=(Variable("host", "Host", 'label_values(up{job="vllm"}, host)'),
                   Variable("instance", "Replica",
                            'label_values(up{job="vllm", host=~"$host"}, instance)')),
        rows=(("Load", load), ("Latency", latency), ("Throughput", throughput)),
        tags=("vllm",))


def gateway() -> Dashboard:
    exporter = (GATEWAY_METRICS,)
    panels = (
        Panel("Gateway /health", "Prometheus's scrape of each gateway's /health (job gateway): "
              "0 when HAProxy is down or no replica behind it is healthy (alert GatewayDown).",
              (Query("{{host}}", _plain('up{job="gateway", host=~"$host"}', "up")),),
              kind="stat"),
        Panel("Requests queued in the gateway", "Requests HAProxy holds because every replica "
              "is at its maxconn (the plan's max_num_seqs) or out for a restart.",
              (Query("{{host}}", _plain(
                  f"sum by ({BY}, host) (haproxy_backend_current_queue{HAPROXY})",
                  "haproxy_backend_current_queue")),), requires=exporter),
        Panel("5xx responses per second", "Responses of class 5xx from the vllm backend "
              "(503: the queue timed out, or no replica is up).",
              (Query("{{host}}", _plain(
                  f"sum by ({BY}, host) (rate(haproxy_backend_http_responses_total"
                  f"{HAPROXY_5XX}[{RATE}]))", "haproxy_backend_http_responses_total")),),
              unit="reqps", requires=exporter),
        Panel("Client sessions", "Open client sessions on the vllm frontend.",
              (Query("{{host}}", _plain(
                  f"sum by ({BY}, host) (haproxy_frontend_current_sessions{HAPROXY})",
                  "haproxy_frontend_current_sessions")),), requires=exporter),
    )
    return Dashboard(
        uid="vllm-fleet-gateway",
        title="vLLM fleet / Gateway",
        description="Each engine host's HAProxy gateway. Panels marked with "
                    f"{GATEWAY_METRICS} read HAProxy's own exporter (job haproxy, "
                    "engine_gateway's /metrics/haproxy). Generated by vllm_fleet.serving: "
                    "do not edit, regenerate.",
        variables=(Variable("host", "Host", 'label_values(up{job="gateway"}, host)'),),
        rows=(("Gateway", panels),), tags=("haproxy",))


def gpu() -> Dashboard:
    def dcgm(title: str, description: str, field_name: str, unit: str,
             kind: str = "timeseries", extra: bool = False) -> Panel:
        return Panel(title, description,
                     (Query("{{host}} GPU {{gpu}}",
                            _plain(f"{field_name}{DCGM_SERIES}", field_name)),),
                     unit=unit, kind=kind, requires=(DCGM, DCGM_EXTRA) if extra else (DCGM,))

    health = (
        dcgm("GPU utilization", "DCGM_FI_DEV_GPU_UTIL: time the GPU was busy.",
             "DCGM_FI_DEV_GPU_UTIL", "percent"),
        dcgm("Framebuffer used", "DCGM_FI_DEV_FB_USED: GPU memory in use (MiB).",
             "DCGM_FI_DEV_FB_USED", "mbytes"),
        dcgm("GPU temperature", "DCGM_FI_DEV_GPU_TEMP.", "DCGM_FI_DEV_GPU_TEMP", "celsius"),
        dcgm("Power draw", "DCGM_FI_DEV_POWER_USAGE.", "DCGM_FI_DEV_POWER_USAGE", "watt"),
    )
    faults = (
        dcgm("Last Xid", "DCGM_FI_DEV_XID_ERRORS: the GPU's last Xid, 0 for none (alerts "
             "GpuXidCritical, GpuXid).", "DCGM_FI_DEV_XID_ERRORS", "none", kind="stat"),
        dcgm("Row remap failure", "DCGM_FI_DEV_ROW_REMAP_FAILURE: 1 when a failing memory row "
             "could not be remapped (alert GpuRowRemapFailure).",
             "DCGM_FI_DEV_ROW_REMAP_FAILURE", "none", kind="stat"),
        Panel("Uncorrectable ECC errors", "Double-bit ECC errors counted in the rate window "
              "(alert GpuDoubleBitEccError).",
              (Query("{{host}} GPU {{gpu}}", _plain(
                  f"increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{DCGM_SERIES}[{RATE}])",
                  "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")),), requires=(DCGM, DCGM_EXTRA)),
        Panel("NVLink errors per second", "NVLink flow-control CRC errors and replays "
              "(alerts GpuNvlinkCrcErrors, GpuNvlinkReplayErrors).",
              (Query("CRC {{host}} GPU {{gpu}}", _plain(
                  f"rate(DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL{DCGM_SERIES}[{RATE}])",
                  "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL")),
               Query("replay {{host}} GPU {{gpu}}", _plain(
                   f"rate(DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL{DCGM_SERIES}[{RATE}])",
                   "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL"))),
              requires=(DCGM, DCGM_EXTRA)),
        # DCGM renamed the field too (3.3): the rules read both names, so does the panel.
        Panel("Clock event reasons", "The clock event reasons bitmask (0x8 HW slowdown, 0x20 "
              "SW thermal, 0x40 HW thermal, 0x80 power brake; alerts GpuHwSlowdown and the "
              "others): DCGM_FI_DEV_CLOCKS_EVENT_REASONS since DCGM 3.3, "
              "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS before.",
              (Query("{{host}} GPU {{gpu}}", (
                  Variant(f"DCGM_FI_DEV_CLOCKS_EVENT_REASONS{DCGM_SERIES}",
                          ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS",)),
                  Variant(f"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{DCGM_SERIES}",
                          ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",)))),),
              unit="none", requires=(DCGM, DCGM_EXTRA)),
    )
    vram = (
        Panel("GPU memory used (nvidia-smi)", "Used over total memory of each GPU, from the "
              "VRAM collector (node exporter's textfile; alert GpuVramLeak reads the same).",
              (Query("{{host}} GPU {{gpu}}", _plain(
                  f"nvidia_gpu_memory_used_bytes{NODE} / nvidia_gpu_memory_total_bytes{NODE}",
                  "nvidia_gpu_memory_used_bytes", "nvidia_gpu_memory_total_bytes")),),
              unit="percentunit", max_value=1, requires=(NVIDIA_GPU,)),
        Panel("GPU memory per unit", "GPU memory of each process, summed by its systemd unit "
              "(a replica is vllm@N): whose memory grows.",
              (Query("{{host}} {{unit}}", _plain(
                  f"sum by (host, unit) (nvidia_gpu_process_memory_used_bytes{NODE})",
                  "nvidia_gpu_process_memory_used_bytes")),),
              unit="bytes", requires=(NVIDIA_GPU,)),
        Panel("VRAM collector", "1 when nvidia-smi answered the collector's last run (0 on a "
              "host without a GPU, or with a driver that lost it).",
              (Query("{{host}}", _plain(f"nvidia_vram_collector_up{NODE}",
                                        "nvidia_vram_collector_up")),), kind="stat"),
    )
    return Dashboard(
        uid="vllm-fleet-gpu",
        title="vLLM fleet / GPUs",
        description="GPU health from DCGM exporter (job dcgm, where gpu_metrics_dcgm_exporter "
                    "is on) and the VRAM collector (job node). Generated by "
                    "vllm_fleet.serving: do not edit, regenerate.",
        variables=(Variable("host", "Host", 'label_values(up{job=~"dcgm|node"}, host)'),),
        rows=(("Health", health), ("Faults", faults), ("Memory (nvidia-smi)", vram)),
        tags=("gpu",))


def host() -> Dashboard:
    disks = selector('job="node"', 'host=~"$host"',
                     'fstype!~"tmpfs|ramfs|devtmpfs|squashfs|nsfs|fuse.lxcfs"')
    nics = selector('job="node"', 'host=~"$host"', 'device!="lo"')
    idle = selector('job="node"', 'host=~"$host"', 'mode="idle"')

    def one(legend: str, expr: str, *families: str) -> tuple[Query, ...]:
        return (Query(legend, _plain(expr, *families)),)

    panels = (
        Panel("CPU busy", "Share of CPU time not idle, all cores of the host.",
              one("{{host}}", f"1 - avg by ({BY}, host) (rate(node_cpu_seconds_total{idle}"
                              f"[{RATE}]))", "node_cpu_seconds_total"),
              unit="percentunit", max_value=1),
        Panel("Load average (1 min)", "node_load1.",
              one("{{host}}", f"node_load1{NODE}", "node_load1")),
        Panel("Memory used", "1 - MemAvailable / MemTotal.",
              one("{{host}}", f"1 - node_memory_MemAvailable_bytes{NODE} / "
                              f"node_memory_MemTotal_bytes{NODE}",
                  "node_memory_MemAvailable_bytes", "node_memory_MemTotal_bytes"),
              unit="percentunit", max_value=1),
        Panel("Disk space used", "Share of each filesystem in use (the model store and the "
              "engine's venv fill it).",
              one("{{host}} {{mountpoint}}", f"1 - node_filesystem_avail_bytes{disks} / "
                                             f"node_filesystem_size_bytes{disks}",
                  "node_filesystem_avail_bytes", "node_filesystem_size_bytes"),
              unit="percentunit", max_value=1),
        Panel("Disk I/O", "Bytes read and written per second, all disks of the host.",
              (Query("read {{host}}", _plain(
                  f"sum by ({BY}, host) (rate(node_disk_read_bytes_total{NODE}[{RATE}]))",
                  "node_disk_read_bytes_total")),
               Query("written {{host}}", _plain(
                   f"sum by ({BY}, host) (rate(node_disk_written_bytes_total{NODE}[{RATE}]))",
                   "node_disk_written_bytes_total"))),
              unit="Bps"),
        Panel("Network", "Bytes received and sent per second, every interface but lo.",
              (Query("received {{host}}", _plain(
                  f"sum by ({BY}, host) (rate(node_network_receive_bytes_total{nics}[{RATE}]))",
                  "node_network_receive_bytes_total")),
               Query("sent {{host}}", _plain(
                   f"sum by ({BY}, host) (rate(node_network_transmit_bytes_total{nics}"
                   f"[{RATE}]))", "node_network_transmit_bytes_total"))),
              unit="Bps"),
    )
    return Dashboard(
        uid="vllm-fleet-host",
        title="vLLM fleet / Hosts",
        description="Each engine host's node exporter (job node). Generated by "
                    "vllm_fleet.serving: do not edit, regenerate.",
        variables=(Variable("host", "Host", 'label_values(up{job="node"}, host)'),),
        rows=(("Host", panels),), tags=("node",))


def dashboards(versions: Iterable[object]) -> tuple[Dashboard, ...]:
    """The fleet's dashboards for the vLLM releases VERSIONS (every engine host's)."""
    fleet = releases(versions)
    return (engine(fleet), gateway(), gpu(), host())


# ------------------------------------------------------------------------------ Grafana JSON

PANEL_HEIGHT = 8
PANEL_WIDTH = 12


def _variable_json(variable: Variable) -> dict[str, Any]:
    return {
        "name": variable.name,
        "label": variable.label,
        "type": "query",
        "datasource": DATASOURCE,
        "definition": variable.query,
        "query": {"query": variable.query, "refId": f"{variable.name}-values", "qryType": 1},
        "refresh": 2,  # on time range change: replicas come and go
        "multi": True,
        "includeAll": True,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "options": [],
        "regex": "",
        "sort": 1,
        "hide": 0,
    }


def _panel_json(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    needs = "; ".join(f"{r}: {REQUIREMENTS[r]}" for r in panel.requires)
    description = " ".join(filter(None, (
        panel.description, f"Reads {', '.join(panel.families)}.",
        f"Needs {needs}." if needs else "")))
    defaults: dict[str, Any] = {"unit": panel.unit}
    if panel.unit == "percentunit" or panel.max_value is not None:
        defaults["min"] = 0
    if panel.max_value is not None:
        defaults["max"] = panel.max_value
    if panel.kind == "stat":
        options: dict[str, Any] = {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "value", "graphMode": "area", "justifyMode": "auto",
            "orientation": "auto", "textMode": "auto"}
    else:
        defaults["custom"] = {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10,
                              "showPoints": "never", "spanNulls": False}
        options = {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                   "tooltip": {"mode": "multi", "sort": "desc"}}
    return {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": description,
        "datasource": DATASOURCE,
        "gridPos": {"h": PANEL_HEIGHT, "w": PANEL_WIDTH, "x": x, "y": y},
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": options,
        "targets": [{"refId": chr(ord("A") + n), "datasource": DATASOURCE, "expr": q.expr,
                     "legendFormat": q.legend, "range": True, "editorMode": "code"}
                    for n, q in enumerate(panel.queries)],
        # Not Grafana's: what the tests and scripts/dashboard-check.py read.
        "vllmFleet": {"families": list(panel.families), "requires": list(panel.requires)},
    }


def dashboard_json(dashboard: Dashboard) -> dict[str, Any]:
    """Grafana's JSON model of DASHBOARD: rows of two panels, ids from 1 in reading order."""
    panels: list[dict[str, Any]] = []
    y = 0
    for row_title, row_panels in dashboard.rows:
        panels.append({"id": len(panels) + 1, "type": "row", "title": row_title,
                       "collapsed": False, "panels": [],
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}})
        y += 1
        for n, panel in enumerate(row_panels):
            panels.append(_panel_json(panel, len(panels) + 1, (n % 2) * PANEL_WIDTH,
                                      y + (n // 2) * PANEL_HEIGHT))
        y += ((len(row_panels) + 1) // 2) * PANEL_HEIGHT
    datasource = {"name": "datasource", "label": "Data source", "type": "datasource",
                  "query": "prometheus", "current": {}, "regex": "", "hide": 0,
                  "refresh": 1, "options": []}
    return {
        "id": None,
        "uid": dashboard.uid,
        "title": dashboard.title,
        "description": dashboard.description,
        "tags": [TAG, *dashboard.tags],
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "editable": True,
        "graphTooltip": 1,
        "fiscalYearStartMonth": 0,
        "liveNow": False,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "timepicker": {},
        "timezone": "browser",
        "weekStart": "",
        "annotations": {"list": [{
            "builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"},
            "enable": True, "hide": True, "iconColor": "rgba(0, 211, 255, 1)",
            "name": "Annotations & Alerts", "type": "dashboard"}]},
        "links": [{"title": "vLLM fleet", "type": "dashboards", "tags": [TAG],
                   "asDropdown": True, "includeVars": True, "keepTime": True,
                   "icon": "external link", "targetBlank": False, "tooltip": "", "url": ""}],
        "templating": {"list": [datasource, *map(_variable_json, dashboard.variables)]},
        "panels": panels,
    }


def render(versions: Iterable[object]) -> dict[str, str]:
    """File name -> the dashboard's JSON text (sorted keys, two-space indent, a final
    newline): the same releases always give the same bytes."""
    return {d.filename: json.dumps(dashboard_json(d), indent=2, sort_keys=True) + "\n"
            for d in dashboards(versions)}


def panels_requiring(requirement: str, versions: Iterable[object]) -> list[str]:
    """"dashboard / panel" of every panel that needs REQUIREMENT (REQUIREMENTS' keys)."""
    return [f"{d.title} / {p.title}" for d in dashboards(versions) for p in d.panels
            if requirement in p.requires]
