"""One vLLM engine across several hosts: tensor parallelism inside each host, one pipeline
stage per host (vLLM's native multi-node runtime, the mp executor).

Every host runs ``vllm serve`` with the same engine flags plus ``--nnodes P --node-rank R
--master-addr <rank 0's host> --master-port M``; every rank but 0 adds ``--headless``.
A headless rank (vllm/entrypoints/cli/serve.py ``run_headless``, 0.32.0-0.34.0) builds
the whole engine config from its own command line (``create_engine_config(headless=True)``)
and starts its local workers (``MultiprocExecutor``): so it needs the engine flags that size
memory and the KV cache (model, parallelism, dtypes, block size, KV pool, max_model_len,
max_num_seqs, max_num_batched_tokens), exactly as rank 0 has them, while the API server's
flags (--host, --port, --served-model-name) are ignored there and left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .errors import PlanError
from .options import positive_int
from .plan import kv_plan
from .versions import flag_refusal, parse_version

# Flags plan_group decides for every rank; extra_flags may not set them.
GROUP_FLAGS = frozenset({"nnodes", "node-rank", "master-addr", "master-port", "headless",
                         "data-parallel-size", "data-parallel-size-local",
                         "data-parallel-address", "data-parallel-rpc-port",
                         "distributed-executor-backend"})
# The API server's flags: rank 0 only (a headless rank starts no API server).
API_ONLY = ("--host", "--port", "--served-model-name")


def _hosts(hosts: object) -> list[str]:
    fix = "list each host once, rank 0 (the API server, the master address) first"
    if isinstance(hosts, str) or not isinstance(hosts, Sequence) or not hosts:
        raise PlanError("hosts", f"must be a list of host names, got {hosts!r}", fix)
    names = []
    for host in hosts:
        if not isinstance(host, str) or not host.strip() or host != host.strip() or \
                any(c.isspace() for c in host):
            raise PlanError("hosts", f"{host!r} is not a host name or address", fix)
        names.append(host)
    seen = {h for h in names if names.count(h) > 1}
    if seen:
        raise PlanError("hosts", f"{sorted(seen)[0]} appears more than once (one engine "
                        "rank per host)", fix)
    return names


def _strip_api_flags(argv: Sequence[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in API_ONLY:
            skip = True
            continue
        out.append(arg)
    return out


def plan_group(config: object, hosts: list[str], gpus_per_host: int, master_port: int,
               **options: Any) -> list[dict[str, Any]]:
    """One engine over ``hosts`` (tensor parallel size = gpus_per_host, one pipeline stage
    per host): one dict per rank, rank 0 first: {rank, host, headless, argv, environment,
    stage, plan}. ``options`` are kv_plan's; pipeline_parallel_size defaults to the host
    count and tensor_parallel_size to gpus_per_host (either, given, must equal it)."""
    names = _hosts(hosts)
    gpus = positive_int(gpus_per_host, "gpus_per_host", "give the GPUs of one host (8)")
    port = positive_int(master_port, "master_port", "use a free TCP port such as 29501")
    if port > 65535:
        raise PlanError("master_port", f"{port} is not a TCP port", "use one such as 29501")
    if len(names) < 2:
        raise PlanError("hosts", "one host is not a group",
                        "plan one host with kv_plan (plan_replicas), or list 2 or more hosts")
    pp = options.pop("pipeline_parallel_size", None)
    if pp is not None and positive_int(pp, "pipeline_parallel_size",
                                       "leave it out: one stage per host") != len(names):
        raise PlanError("hosts", f"{len(names)} hosts for pipeline_parallel_size {pp} "
                        "(one pipeline stage per host)",
                        f"list {pp} hosts, or set pipeline_parallel_size {len(names)}")
    tp = options.pop("tensor_parallel_size", None)
    if tp is not None and positive_int(tp, "tensor_parallel_size",
                                       "leave it out: gpus_per_host") != gpus:
        raise PlanError("tensor_parallel_size",
                        f"{tp} is not gpus_per_host {gpus}: tensor parallelism spans one "
                        "host's GPUs, pipeline parallelism the hosts",
                        f"set tensor_parallel_size {gpus} (or leave it out)")
    extra = options.get("extra_flags") or {}
    if isinstance(extra, dict):
        for raw in extra:
            if str(raw).lstrip("-").replace("_", "-") in GROUP_FLAGS:
                raise PlanError(f"extra_flags.{raw}", "is decided by plan_group for each rank",
                                "remove it")
    plan = kv_plan(config, tensor_parallel_size=gpus, pipeline_parallel_size=len(names),
                   **options)
    version = parse_version(plan["vllm_version"])
    for flag in ("nnodes", "node-rank", "master-addr", "master-port", "headless"):
        refusal = flag_refusal(flag, version)
        if refusal:
            raise PlanError("vllm_version", f"--{flag}: {refusal}",
                            "plan for vLLM 0.32.0 or newer")
    pipe = plan.get("pipeline") or {}
    stages = pipe.get("stages") or []
    ranks = []
    for rank, host in enumerate(names):
        node = ["--nnodes", str(len(names)), "--node-rank", str(rank),
                "--master-addr", names[0], "--master-port", str(port)]
        argv = ([*plan["argv"], *node] if rank == 0
                else [*_strip_api_flags(plan["argv"]), *node, "--headless"])
        ranks.append({
            "rank": rank, "host": host, "headless": rank > 0, "argv": argv,
            "environment": dict(pipe.get("environment") or {}),
            "stage": stages[rank] if rank < len(stages) else None,
            "plan": plan,
        })
    return ranks
