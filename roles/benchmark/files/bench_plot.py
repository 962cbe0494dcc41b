#!/usr/bin/env python3
"""Plot a concurrency sweep: throughput and p95 TTFT against concurrency, preemptions marked.

Reads the per-replica JSON the benchmark role saves and writes a PNG next to it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def plot(report_path: Path) -> Path:
    report = json.loads(report_path.read_text())
    runs = sorted(report["runs"], key=lambda r: int(r["concurrency"]))
    levels = [int(r["concurrency"]) for r in runs]
    fig, throughput_axis = plt.subplots(figsize=(8, 4.5), dpi=110)
    throughput_axis.plot(levels, [r["output_throughput"] for r in runs], "o-",
                         color="tab:blue", label="output tokens/s")
    throughput_axis.set_xscale("log", base=2)
    throughput_axis.set_xticks(levels, [str(c) for c in levels])
    throughput_axis.set_xlabel("concurrency (requests in flight)")
    throughput_axis.set_ylabel("output tokens/s", color="tab:blue")
    ttft_axis = throughput_axis.twinx()
    ttft_axis.plot(levels, [r["p95_ttft_ms"] / 1000 for r in runs], "s--", color="tab:red",
                   label="p95 TTFT (s)")
    ttft_axis.set_ylabel("p95 TTFT (s)", color="tab:red")
    for run in runs:
        if run["preemptions"] > 0:
            throughput_axis.annotate(f"{run['preemptions']:.0f} preemptions",
                                     (int(run["concurrency"]), run["output_throughput"]),
                                     textcoords="offset points", xytext=(0, -18),
                                     ha="center", color="darkred", fontsize=8)
    plateau = report.get("plateau")
    if plateau:
        throughput_axis.axvline(plateau["concurrency"], color="grey", linestyle=":")
        throughput_axis.annotate(f"plateau {plateau['concurrency']}",
                                 (plateau["concurrency"], plateau["output_throughput"]),
                                 textcoords="offset points", xytext=(4, 8), fontsize=8)
    planned = report["flags"].get("max_num_seqs")
    throughput_axis.set_title(f"{report['host']} {report['replica']}: concurrency sweep "
                              f"(planned max_num_seqs {planned})")
    fig.tight_layout()
    out = report_path.with_suffix(".png")
    fig.savefig(out)
    return out


if __name__ == "__main__":
    print(plot(Path(sys.argv[1])))
