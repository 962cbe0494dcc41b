"""Benchmark summaries, the gate and the plateau, on vllm bench serve's result format."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.vllm_fleet.serving.plugins.filter.bench_report import (  # noqa: E402
    bench_gate,
    bench_judge,
    bench_plateau,
    bench_summary,
    bench_table,
    metric_sum,
)


def result(ttft50: float = 120.0, throughput: float = 300.0, completed: int = 64,
           failed: int = 0) -> dict[str, Any]:
    """The keys vllm bench serve --save-result --metric-percentiles 50,95,99 writes."""
    return {"duration": 12.5, "completed": completed, "failed": failed, "num_prompts": 64,
            "request_throughput": 5.1, "output_throughput": throughput,
            "total_token_throughput": 3 * throughput, "mean_ttft_ms": ttft50 * 1.1,
            "median_ttft_ms": ttft50, "p50_ttft_ms": ttft50, "p95_ttft_ms": ttft50 * 3,
            "p99_ttft_ms": ttft50 * 4, "max_concurrency": 8}


REPLICA = {"name": "vllm-0", "port": 8000,
           "plan": {"flags": {"max_num_seqs": 12}, "model": "/srv/m", "kv_pool_tokens": 2048}}


def test_summary_carries_the_figures_and_the_replica() -> None:
    summary = bench_summary(result(), 37, 37, REPLICA, 8)
    assert summary["concurrency"] == 8 and summary["preemptions"] == 0
    assert summary["p50_ttft_ms"] == 120 and summary["p95_ttft_ms"] == 360
    assert summary["replica"] == "vllm-0" and summary["port"] == 8000


def test_missing_percentiles_name_the_fix() -> None:
    raw = result()
    del raw["p95_ttft_ms"]
    with pytest.raises(ValueError, match="p95_ttft_ms.*--metric-percentiles 50,95,99"):
        bench_summary(raw, 0, 0)


def test_gate_passes_a_healthy_run_and_names_every_failure() -> None:
    assert bench_gate(bench_summary(result(), 0, 0))["passed"]
    bad = bench_gate(bench_summary(result(ttft50=10800, failed=2, completed=62), 0, 91))
    assert not bad["passed"]
    assert bad["reasons"] == ["p50 TTFT 10800 ms >= 500 ms", "91 preemptions > 0 allowed",
                              "2 failed requests > 0 allowed"]
    lenient = bench_gate(bench_summary(result(ttft50=600), 0, 3),
                         {"p50_ttft_ms": 1000, "max_preemptions": 5})
    assert lenient["passed"]


def test_plateau_is_before_throughput_stops_rising_or_preemptions_start() -> None:
    def point(c: int, tput: float, pre: float = 0) -> dict[str, Any]:
        return bench_judge(bench_summary(result(throughput=tput), 0, pre, None, c))

    rising = [point(1, 100), point(2, 190), point(4, 350), point(8, 360), point(16, 300)]
    assert bench_plateau(rising)["concurrency"] == 4
    storm = [point(1, 100), point(2, 190), point(4, 350, pre=40)]
    assert bench_plateau(storm) == {"concurrency": 2, "output_throughput": 190.0,
                                    "reason": "preemptions start at concurrency 4"}
    assert "still rising" in bench_plateau([point(1, 100), point(2, 200)])["reason"]
    table = bench_table(rising).splitlines()
    assert table[0].startswith("concurrency") and table[3].split()[:2] == ["4", "350.0"]


def test_metric_sum_adds_every_series_of_one_metric() -> None:
    text = ('vllm:num_preemptions_total{engine="0",model_name="m"} 91.0\n'
            'vllm:num_preemptions_total{engine="1",model_name="m"} 9\n'
            "vllm:num_preemptions_created 1.7e9\n")
    assert metric_sum(text, "vllm:num_preemptions_total") == 100
    assert metric_sum(text, "vllm:num_requests_running") == 0
