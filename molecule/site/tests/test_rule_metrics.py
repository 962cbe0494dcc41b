"""Drift check, rules vs. engine (issue 22, item 4): against the real CPU engine that
playbooks/site.yml deployed, every vLLM metric name the deployed Prometheus rules read is one
the engine exports on /metrics. The unit test tests/unit/test_prometheus_rules.py holds the
rules to the planner's version table; this holds the table's names to the engine itself.

No metric is excused as lazily created: every name the rules read must be on /metrics of a
freshly started replica (a histogram by its _bucket/_sum/_count series, a counter by its
_total series)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from testinfra.host import Host

ROOT = Path(__file__).resolve().parents[3]

from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner import (  # noqa: E402
    metric_names,
    parse_version,
)
from host_http import request_in_host  # noqa: E402

LOCAL = ROOT / "inventories/local"
# The engine group's variables, every file of the directory (as Ansible reads them: in name
# order, later files win): main.yml, cpu_engine.yml (the CPU engine), constraints.yml.
GROUP_VARS = {k: v for path in sorted((LOCAL / "group_vars/vllm_servers").glob("*.yml"))
              for k, v in (yaml.safe_load(path.read_text()) or {}).items()}
PLAN_DEFAULTS = yaml.safe_load((ROOT / "roles/vllm_plan/defaults/main.yml").read_text())
VERSION = str(GROUP_VARS["vllm_install_version"])
PLAN_HOST = GROUP_VARS.get("vllm_plan_host") or PLAN_DEFAULTS["vllm_plan_host"]
PORT = int(GROUP_VARS.get("vllm_plan_base_port") or PLAN_DEFAULTS["vllm_plan_base_port"])
RULES = "/etc/prometheus/rules/vllm.yml"
SUFFIXES = ("_bucket", "_sum", "_count")


def rule_metric_names(text: str) -> set[str]:
    """vLLM metric names the rules read (histogram series to their family name); the
    recording rules' own outputs (instance:vllm_...) are no engine metric."""
    return {re.sub(r"_(bucket|sum|count)$", "", name)
            for name in re.findall(r"(?<![\w:])vllm:[a-z_]+", text)}


def exported_samples(body: str) -> set[str]:
    """Sample names of a Prometheus text exposition (comments and HELP/TYPE lines left out)."""
    return {re.split(r"[{\s]", line, maxsplit=1)[0] for line in body.splitlines()
            if line and not line.startswith("#")}


def test_the_rules_are_for_the_deployed_release(host: Host) -> None:
    rules = host.file(RULES)
    assert rules.exists, RULES
    assert f"Rules for vLLM {VERSION} " in rules.content_string
    used = rule_metric_names(rules.content_string)
    assert used and used <= set(metric_names(parse_version(VERSION)).values()), used


def test_the_engine_exports_every_metric_the_rules_read(host: Host) -> None:
    used = rule_metric_names(host.file(RULES).content_string)
    status, body = request_in_host(host, f"http://{PLAN_HOST}:{PORT}/metrics")
    assert status == 200, body[:500]
    samples = exported_samples(body)
    missing = sorted(name for name in used
                     if name not in samples and not any(name + s in samples for s in SUFFIXES))
    vllm_samples = sorted(s for s in samples if s.startswith("vllm:"))
    assert missing == [], f"rules read {missing}; the engine exports {vllm_samples}"
