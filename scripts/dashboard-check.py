#!/usr/bin/env python3
"""Evaluate every query of the generated Grafana dashboards against a live Prometheus.

    scripts/dashboard-check.py --prometheus http://127.0.0.1:9090 \\
        [--allow gpu --allow gateway-metrics-endpoint] [--allow-panel TITLE] \\
        DASHBOARD.json|DIR ...

Each panel query (Grafana's variables replaced: $__rate_interval, $__interval and $__range by
--window, a template variable such as $host by its "All" value, .*) goes through Prometheus's
/api/v1/query. A query that comes back without a series is a dashboard that would show
"No data": the script names each one (dashboard, panel, query and the PromQL sent) and exits
1. Panels may be let off for what the setup lacks: --allow NAME excuses the panels whose
"vllmFleet" requirements include NAME (the generator's REQUIREMENTS: dcgm-exporter,
dcgm-extra-counters, nvidia-gpu, gateway-metrics-endpoint; "gpu" stands for the first three),
--allow-panel a panel by its title (shell-style wildcards). A query Prometheus refuses, or an
unreachable Prometheus, fails whatever is allowed. Exit 0 prints how many queries answered.

The dashboards are plugins/plugin_utils/grafana_dashboards.py's (the prometheus_server role
writes them to prometheus_server_dashboards_dir); the script reads nothing but their JSON.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import re
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Grafana's interval variables, all replaced by the window.
INTERVALS = ("__rate_interval", "__interval", "__range")
# --allow gpu: every requirement a host without NVIDIA GPUs lacks.
ALIASES = {"gpu": ("dcgm-exporter", "dcgm-extra-counters", "nvidia-gpu")}
VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]")


@dataclass(frozen=True)
class PanelQuery:
    dashboard: str
    panel: str
    ref_id: str
    expr: str
    requires: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.dashboard} / {self.panel} / {self.ref_id}"


def _panels(panels: Sequence[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    """Every panel, those inside collapsed rows included."""
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels") or [])


def panel_queries(dashboard: Mapping[str, Any]) -> list[PanelQuery]:
    """Each target with a PromQL expression, in the dashboard's order."""
    title = str(dashboard.get("title") or dashboard.get("uid") or "?")
    out = []
    for panel in _panels(dashboard.get("panels") or []):
        requires = tuple((panel.get("vllmFleet") or {}).get("requires") or ())
        for target in panel.get("targets") or []:
            if target.get("expr"):
                out.append(PanelQuery(title, str(panel.get("title", "?")),
                                      str(target.get("refId", "?")), str(target["expr"]),
                                      requires))
    return out


def variable_values(dashboard: Mapping[str, Any]) -> dict[str, str]:
    """What each template variable stands for in the check: its "All" value (.* unless the
    variable names another), so the query covers every host and replica."""
    values = {}
    for variable in (dashboard.get("templating") or {}).get("list") or []:
        if variable.get("type") != "datasource":
            values[str(variable["name"])] = str(variable.get("allValue") or ".*")
    return values


def substitute(expr: str, values: Mapping[str, str], window: str) -> str:
    """EXPR with Grafana's variables replaced; an unknown one is left for Prometheus to
    refuse (a dashboard bug the check reports)."""
    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2) or match.group(3)
        if name in INTERVALS:
            return window
        return values.get(name, match.group(0))
    return VARIABLE.sub(replace, expr)


def evaluate(base_url: str, expr: str, timeout: float) -> tuple[int | None, str]:
    """(number of series, "") for EXPR, or (None, why) when Prometheus refused or failed."""
    url = base_url.rstrip("/") + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            body = json.load(response)
    except urllib.error.HTTPError as error:
        try:
            body = json.load(error)
        except ValueError:
            return None, f"HTTP {error.code}"
    except (urllib.error.URLError, OSError, ValueError) as error:
        return None, f"no answer from {base_url}: {error}"
    if body.get("status") != "success":
        return None, f"{body.get('errorType', 'error')}: {body.get('error', body)}"
    data = body.get("data") or {}
    result = data.get("result")
    if data.get("resultType") in ("scalar", "string"):
        return 1, ""
    return len(result or []), ""


def load_dashboards(paths: Sequence[Path]) -> list[dict[str, Any]]:
    files: list[Path] = []
    for path in paths:
        files += sorted(path.glob("*.json")) if path.is_dir() else [path]
    if not files:
        raise SystemExit(f"dashboard-check: no dashboard JSON in {', '.join(map(str, paths))}")
    return [json.loads(file.read_text()) for file in files]


def allowed(query: PanelQuery, allow: Sequence[str], allow_panels: Sequence[str]) -> bool:
    names = {n for a in allow for n in ALIASES.get(a, (a,))}
    return bool(names & set(query.requires)) or any(
        fnmatch.fnmatchcase(query.panel, pattern) for pattern in allow_panels)


def check(base_url: str, dashboards: Sequence[Mapping[str, Any]], *, allow: Sequence[str] = (),
          allow_panels: Sequence[str] = (), window: str = "5m", timeout: float = 10.0,
          out: Any = sys.stdout) -> int:
    """Evaluate every query; print one line per problem; 0 when none, else 1."""
    empty, failed, answered, excused = [], [], 0, 0
    for dashboard in dashboards:
        values = variable_values(dashboard)
        for query in panel_queries(dashboard):
            sent = substitute(query.expr, values, window)
            series, why = evaluate(base_url, sent, timeout)
            if series is None:
                failed.append(f"{query.name}: {why}\n    {sent}")
            elif series > 0:
                answered += 1
            elif allowed(query, allow, allow_panels):
                excused += 1
            else:
                needs = f" (needs {', '.join(query.requires)})" if query.requires else ""
                empty.append(f"{query.name}: no series{needs}\n    {sent}")
    for line in failed + empty:
        print(line, file=out)
    if failed or empty:
        print(f"dashboard-check: {len(failed)} queries failed, {len(empty)} returned no series "
              f"({answered} answered, {excused} empty but allowed)", file=out)
        return 1
    print(f"dashboard-check: {answered} queries answered ({excused} empty but allowed)",
          file=out)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--prometheus", required=True, help="Prometheus base URL")
    parser.add_argument("--allow", action="append", default=[], metavar="NAME",
                        help="requirement whose panels may be empty (gpu: every GPU one)")
    parser.add_argument("--allow-panel", action="append", default=[], metavar="TITLE",
                        help="panel title (wildcards allowed) that may be empty")
    parser.add_argument("--window", default="5m", help="value of $__rate_interval (5m)")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per query")
    parser.add_argument("dashboards", nargs="+", type=Path, help="dashboard JSON files or dirs")
    args = parser.parse_args(argv)
    return check(args.prometheus, load_dashboards(args.dashboards), allow=args.allow,
                 allow_panels=args.allow_panel, window=args.window, timeout=args.timeout)


if __name__ == "__main__":
    sys.exit(main())
