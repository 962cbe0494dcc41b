"""Issue 22, item 5: one replica list, read one way. The plan play's fact vllm_plan_replicas
is the source; every consumer that reads a host's replicas (Prometheus for every engine
host, benchmark for its own) reads it through the engine_replicas filter over that host's
variables, and no template re-derives ports from the planner's inputs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[4]

# PlanError as the filter raises it (the planner imported through the collection).
from ansible_collections.vllm_fleet.serving.plugins.filter.kv_plan import (  # noqa: E402
    PlanError,
    engine_replicas,
    vllm_metric_selectors,
)
from test_prometheus_rules import PROMTOOL, render  # noqa: E402

PLANNED = [{"index": 0, "name": "vllm-0", "port": 8100, "plan": {"ok": True}},
           {"index": 1, "name": "vllm-1", "port": 8101, "plan": {"ok": True}}]


def test_the_plan_is_the_replica_list() -> None:
    # The plan's ports win over what the inputs alone would give.
    host = {"vllm_plan_replicas": PLANNED, "vllm_plan_gpu_count": 8, "vllm_plan_base_port": 9000}
    assert engine_replicas(host) == PLANNED
    assert engine_replicas(host, planned_only=True) == PLANNED


def test_without_a_plan_the_planners_split_of_the_hosts_inputs() -> None:
    host = {"vllm_plan_gpu_count": 8, "vllm_plan_options": {"tensor_parallel_size": 4},
            "vllm_plan_base_port": 8200}
    assert [(r["name"], r["port"], r["cuda_visible_devices"]) for r in engine_replicas(host)] \
        == [("vllm-0", 8200, "0,1,2,3"), ("vllm-1", 8201, "4,5,6,7")]
    # Unset inputs are vllm_plan's defaults (one GPU, base port 8000).
    assert [(r["name"], r["port"]) for r in engine_replicas({})] == [("vllm-0", 8000)]
    # A consumer that needs each replica's plan gets none rather than a made-up one.
    assert engine_replicas(host, planned_only=True) == []


def test_no_consumer_reads_the_replicas_another_way() -> None:
    """Tasks, templates and vars of every role but the planner's, and rebuild/site: no direct
    read of the plan fact and no re-derivation (vllm_replicas) of a host's replicas."""
    paths = [p for p in [*ROOT.glob("roles/*/tasks/*.yml"), *ROOT.glob("roles/*/templates/*.j2"),
                         *ROOT.glob("roles/*/vars/*.yml"), ROOT / "playbooks/site.yml",
                         ROOT / "playbooks/rebuild.yml"]
             if p.parts[-3] != "vllm_plan"]
    for path in sorted(paths):
        text = "\n".join(line for line in path.read_text().splitlines()
                         if not line.lstrip().startswith(("#", "{#")))
        assert "| vllm_replicas" not in text, path
        for line in text.splitlines():
            if "vllm_plan_replicas" in line:
                assert "fail_msg" in text and "{{" not in line, (path, line)
    defaults = yaml.safe_load((ROOT / "roles/benchmark/defaults/main.yml").read_text())
    assert "engine_replicas" in defaults["benchmark_replicas"]


@pytest.mark.skipif(PROMTOOL is None, reason="the render test module needs promtool")
def test_prometheus_scrapes_each_hosts_planned_replicas(tmp_path: Path) -> None:
    out = render(tmp_path, "0.32.0", ROOT / "inventories" / "example",
                 host_vars={"h200-a.gpu.example.internal": {"vllm_plan_replicas": PLANNED}})
    config = yaml.safe_load((out / "prometheus.yml").read_text())
    vllm = next(job for job in config["scrape_configs"] if job["job_name"] == "vllm")
    a = {sc["labels"]["instance"] for sc in vllm["static_configs"]
         if sc["labels"]["host"] == "h200-a.gpu.example.internal"}
    assert a == {"h200-a.gpu.example.internal:8100", "h200-a.gpu.example.internal:8101"}
    b = {sc["labels"]["instance"] for sc in vllm["static_configs"]
         if sc["labels"]["host"] == "h200-b.gpu.example.internal"}
    assert b == {"h200-b.gpu.example.internal:8000"}  # no plan here: its inputs' split


def test_metric_selectors_of_one_release_and_of_a_fleet_mid_upgrade() -> None:
    """(item 4) One release: plain names, as before. Two whose names differ: both, by regex."""
    one = vllm_metric_selectors(["0.32.0", "0.32.0"])
    assert one["kv_cache_usage"] == "vllm:kv_cache_usage_perc"
    assert one["ttft_bucket"] == "vllm:time_to_first_token_seconds_bucket"
    two = vllm_metric_selectors(["0.32.0", "0.6.2"])
    assert two["kv_cache_usage"] == \
        '{__name__=~"vllm:gpu_cache_usage_perc|vllm:kv_cache_usage_perc"}'
    assert two["preemptions"] == "vllm:num_preemptions_total"
    with pytest.raises(PlanError, match="prometheus_server_engine_group"):
        vllm_metric_selectors([])
