"""Benchmark results: summary, pre-rollout gate and the concurrency plateau.

Pure Python over the JSON that ``vllm bench serve --save-result`` writes; the benchmark
playbook feeds it the engine's preemption counter before and after each run.

    {{ result | bench_summary(preemptions_before, preemptions_after, replica) }}
    {{ summary | bench_gate(thresholds) }}
    {{ summaries | bench_plateau }}
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

DEFAULT_GATE = {"p50_ttft_ms": 500.0, "max_preemptions": 0, "max_failed": 0}
PLATEAU_GAIN = 0.05  # throughput must rise by 5% per concurrency step to count as rising


def metric_sum(metrics_text: str, name: str) -> float:
    """Sum of a metric's samples in Prometheus text exposition (0 when absent)."""
    pattern = re.compile(rf"^{re.escape(name)}(?:{{[^}}]*}})?\s+([0-9.eE+-]+)\s*$", re.M)
    return sum(float(value) for value in pattern.findall(metrics_text))


def _number(result: Mapping[str, Any], key: str) -> float:
    value = result.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"benchmark result has no number '{key}' (got {value!r}): run "
                         "vllm bench serve with --save-result --metric-percentiles 50,95,99")
    return float(value)


def bench_summary(result: Mapping[str, Any], preemptions_before: float,
                  preemptions_after: float, replica: Mapping[str, Any] | None = None,
                  concurrency: int | None = None) -> dict[str, Any]:
    """The figures the gate and the sweep use, for one replica at one concurrency."""
    completed = int(_number(result, "completed"))
    prompts = int(result.get("num_prompts", completed) or completed)
    failed = int(result["failed"]) if isinstance(result.get("failed"), int) else \
        max(0, prompts - completed)
    summary: dict[str, Any] = {
        "concurrency": concurrency if concurrency is not None else result.get("max_concurrency"),
        "completed": completed,
        "failed": failed,
        "duration_s": _number(result, "duration"),
        "request_throughput": _number(result, "request_throughput"),
        "output_throughput": _number(result, "output_throughput"),
        "total_token_throughput": _number(result, "total_token_throughput"),
        "mean_ttft_ms": _number(result, "mean_ttft_ms"),
        "p50_ttft_ms": _number(result, "p50_ttft_ms"),
        "p95_ttft_ms": _number(result, "p95_ttft_ms"),
        "p99_ttft_ms": _number(result, "p99_ttft_ms"),
        "preemptions": max(0.0, float(preemptions_after) - float(preemptions_before)),
    }
    if replica is not None:
        summary.update({"replica": replica.get("name"), "port": replica.get("port")})
    return summary


def bench_gate(summary: Mapping[str, Any],
               thresholds: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Pass only with a low median TTFT, (near) zero preemptions and no failed request."""
    limits = {**DEFAULT_GATE, **(thresholds or {})}
    reasons = []
    if summary["p50_ttft_ms"] >= float(limits["p50_ttft_ms"]):
        reasons.append(f"p50 TTFT {summary['p50_ttft_ms']:.0f} ms >= "
                       f"{float(limits['p50_ttft_ms']):.0f} ms")
    if summary["preemptions"] > float(limits["max_preemptions"]):
        reasons.append(f"{summary['preemptions']:.0f} preemptions > "
                       f"{limits['max_preemptions']} allowed")
    if summary["failed"] > int(limits["max_failed"]):
        reasons.append(f"{summary['failed']} failed requests > {limits['max_failed']} allowed")
    return {"passed": not reasons, "reasons": reasons, "thresholds": limits}


def bench_judge(summary: Mapping[str, Any],
                thresholds: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The summary with its gate verdict under 'gate'."""
    return {**summary, "gate": bench_gate(summary, thresholds)}


def bench_plateau(summaries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The highest concurrency before throughput stops rising or preemptions start."""
    points = sorted(summaries, key=lambda s: int(s["concurrency"]))
    if not points:
        raise ValueError("bench_plateau needs at least one sweep point")
    plateau = points[0]
    reason = "only one concurrency level"
    for previous, point in zip(points, points[1:], strict=False):
        if point["preemptions"] > 0:
            reason = f"preemptions start at concurrency {point['concurrency']}"
            break
        gain = point["output_throughput"] / max(previous["output_throughput"], 1e-9) - 1
        if gain < PLATEAU_GAIN:
            reason = (f"throughput rises {gain:+.0%} from {previous['concurrency']} to "
                      f"{point['concurrency']}")
            break
        plateau = point
    else:
        if len(points) > 1:
            reason = "throughput still rising at the highest level measured"
    return {"concurrency": int(plateau["concurrency"]),
            "output_throughput": plateau["output_throughput"], "reason": reason}


def bench_table(summaries: Sequence[Mapping[str, Any]]) -> str:
    """The notes' chapter-7 table: throughput, p95 TTFT and preemptions per concurrency."""
    lines = ["concurrency  output tok/s  p50 TTFT ms  p95 TTFT ms  preemptions  failed"]
    for s in sorted(summaries, key=lambda s: int(s["concurrency"])):
        lines.append(f"{int(s['concurrency']):>11}  {s['output_throughput']:>12.1f}  "
                     f"{s['p50_ttft_ms']:>11.0f}  {s['p95_ttft_ms']:>11.0f}  "
                     f"{s['preemptions']:>11.0f}  {s['failed']:>6}")
    return "\n".join(lines)


class FilterModule:
    """bench_summary, bench_gate, bench_judge, bench_plateau, bench_table, metric_sum."""

    def filters(self) -> dict[str, Any]:
        return {"bench_summary": bench_summary, "bench_gate": bench_gate,
                "bench_plateau": bench_plateau, "bench_table": bench_table,
                "bench_judge": bench_judge, "metric_sum": metric_sum}
