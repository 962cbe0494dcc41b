"""bench/preemption_sweep.py: its statistics, verdict and the plans it runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from _scripts import load_script

sweep = load_script("bench/preemption_sweep.py", "preemption_sweep")


def run(seqs: int, tput: float, p95: float, preemptions: int = 0) -> sweep.Run:
    return sweep.Run(seqs, tput, p95 / 2, p95, preemptions, 10.0)


@pytest.mark.parametrize(("values", "q", "expected"), [
    ([3.0], 95, 3.0),
    ([1.0, 2.0, 3.0, 4.0], 50, 2.0),
    ([float(n) for n in range(1, 21)], 95, 19.0),
    ([float(n) for n in range(1, 101)], 95, 95.0),
    ([5.0, 1.0, 4.0, 2.0, 3.0], 100, 5.0),
])
def test_percentile_nearest_rank(values: list[float], q: float, expected: float) -> None:
    assert sweep.percentile(values, q) == expected


def test_verdict_passes_within_the_margins() -> None:
    grid = [run(4, 100.0, 1.0), run(32, 120.0, 8.0, preemptions=50)]
    result = sweep.verdict(grid, run(5, 115.0, 1.2))
    assert result["best_throughput_tok_s"] == 120.0
    assert result["best_ttft_p95_s"] == 1.0
    assert result["pass"]


@pytest.mark.parametrize(("planned", "failed"), [
    (run(5, 113.0, 1.0), "throughput >= 95% of best"),
    (run(5, 120.0, 1.0, preemptions=1), "0 preemptions"),
    (run(5, 120.0, 1.26), "p95 TTFT <= 1.25 x best"),
])
def test_verdict_names_the_failed_check(planned: sweep.Run, failed: str) -> None:
    grid = [run(4, 100.0, 1.0), run(32, 120.0, 8.0, preemptions=50)]
    result = sweep.verdict(grid, planned)
    assert not result["pass"]
    assert [name for name, ok in result["checks"].items() if not ok] == [failed]


def test_median_run() -> None:
    runs = [run(8, 10.0, 1.0, 3), run(8, 30.0, 3.0, 9), run(8, 20.0, 2.0, 4)]
    med = sweep.median_run(runs)
    assert (med.throughput_tok_s, med.ttft_p95_s, med.preemptions) == (20.0, 2.0, 4)


@pytest.mark.parametrize(("config", "kv_bytes", "pool_tokens", "planned"), [
    # The default (bench/models/qwen2-compute-bound.json): 12.5 MiB at 4 KiB/token
    # (8 layers x 2 KV heads x 64 x bf16 x K,V).
    (None, None, 3200, 8),
    # The tiny model: 2 MiB at 1 KiB/token (4 layers x 2 KV heads x 32 x bf16 x K,V).
    (sweep.ROOT / "inventories/local/models/tiny-qwen2/config.json", 2 << 20, 2048, 5),
])
def test_planner_choice_fits_the_small_pool(config: Path | None, kv_bytes: int | None,
                                            pool_tokens: int, planned: int) -> None:
    workload = (sweep.Workload() if config is None or kv_bytes is None
                else sweep.Workload(config=str(config), kv_cache_memory_bytes=kv_bytes))
    plan = sweep.plan_for(workload, "/m", 8234, None)
    assert plan["kv_pool_tokens"] == pool_tokens
    blocks_per_seq = -(-(workload.prompt_tokens + workload.output_tokens) // 32)
    seqs = plan["flags"]["max_num_seqs"]
    # Every p95-length sequence fits 90% of the pool; one more would not.
    assert seqs == planned
    assert seqs * blocks_per_seq <= 0.9 * pool_tokens // 32 < (seqs + 1) * blocks_per_seq
    assert workload.concurrency > pool_tokens // 32 // blocks_per_seq  # oversubscribed
    assert plan["hazards"] == []


def test_sweep_plans_differ_only_in_max_num_seqs() -> None:
    workload = sweep.Workload()
    base = sweep.plan_for(workload, "/m", 8234, None)["argv"]
    big = sweep.plan_for(workload, "/m", 8234, 64)
    assert [h["id"] for h in big["hazards"]] == ["preemption_storm"]
    assert big["hazards"][0]["overridden"]
    diff = [(a, b) for a, b in zip(base, big["argv"], strict=True) if a != b]
    assert diff == [(str(base[base.index("--max-num-seqs") + 1]), "64")]
    assert big["argv"][big["argv"].index("--host") + 1] == "127.0.0.1"
