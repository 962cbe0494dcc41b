"""kv_plan: model config + GPU + tensor parallelism + workload -> safe vLLM flags.

Every input is validated before anything is computed (vllm_planner/options.py); bad input
raises PlanError naming the field. The plan is sized in small steps (size), typed (Plan)
and given to callers as the dict Plan.as_dict returns. Unsafe plans carry hazards and are
refused (HazardError) unless each hazard is overridden with a written reason.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from . import kv_manager, memory, pipeline
from .errors import HazardError, PlanError
from .gpus import GIB
from .model import DTYPE_BYTES, Geometry, load_config, parse_geometry
from .options import (
    CHUNK_FLAG_NEGATABLE_SINCE,
    CHUNK_TOKENS,
    HAZARDS,
    OPTIONS,
    RECOMMENDED_UTILIZATION,
    FlagValue,
    PlanOptions,
    Workload,
    batched_below_seqs,
    check_names,
    parse_options,
)
from .stack import engine_stack, min_driver_for_cuda, stack_problem
from .versions import NEWEST_KNOWN, flag_deprecation

__all__ = ["HAZARDS", "OPTIONS", "Hazard", "Plan", "Sizing", "StackPlan", "StageSizing",
           "Workload", "build_plan", "kv_plan", "size"]

UTILIZATION_CEILING = 0.95
POOL_SLACK = 0.90  # share of the pool the planned max_num_seqs may fill at p95 lengths
MAX_NUM_SEQS_CAP = 1024
MAX_SAFE_CHUNK = 16384
LONG_PROMPT_TOKENS = 4096
HOST_GPUS = 8  # GPUs of one H100/H200 host: tensor parallelism stays inside it
HOST_TP_SIZES = (2, 4, 8)  # wider tensor parallelism the fix may name (one host)


@dataclass(frozen=True)
class Hazard:
    id: str
    message: str  # "<id>: what goes wrong (incident). Fix: ..."
    reason: str | None = None  # the written reason it is overridden with

    @property
    def overridden(self) -> bool:
        return self.reason is not None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "message": self.message,
                               "overridden": self.overridden}
        if self.reason is not None:
            out["reason"] = self.reason
        return out


@dataclass(frozen=True)
class DriverStack:
    source: str
    version: str  # what the host gets: the pin, else the source's default
    branch: int | None
    cuda_compat: bool


@dataclass(frozen=True)
class StackPlan:
    """What the engine's wheel needs from the driver (vllm_planner/stack_table.py, read from
    the packages' own metadata) and, when the driver is given, why it cannot run it."""

    package: str
    vllm: str
    torch: str | None
    cuda: str | None
    min_driver_branch: int | None
    driver: DriverStack | None
    problem: str  # '' when the driver runs the engine, or none was given

    def as_dict(self) -> dict[str, Any]:
        driver = self.driver
        return {
            "package": self.package, "vllm": self.vllm, "torch": self.torch, "cuda": self.cuda,
            "min_driver_branch": self.min_driver_branch,
            "driver": None if driver is None else {
                "source": driver.source, "version": driver.version, "branch": driver.branch,
                "cuda_compat": driver.cuda_compat},
        }


@dataclass(frozen=True)
class StageSizing:
    """One pipeline stage's share of the engine, per GPU of that stage."""

    stage: pipeline.Stage
    weights_per_gpu: int
    pool: int  # its KV pool bytes
    block_bytes: int  # one KV block on this stage: page x its largest projected group
    num_blocks: int  # what its own pool holds (the engine takes the smallest of all stages)

    def as_dict(self) -> dict[str, Any]:
        s = self.stage
        return {"rank": s.rank, "layers": list(s.layers),
                "layer_kinds": pipeline.kinds_summary(s.kinds), "mtp_layers": s.mtp_layers,
                "embedding": s.embedding, "lm_head": s.lm_head,
                "weights_bytes_per_gpu": self.weights_per_gpu,
                "kv_pool_bytes_per_gpu": self.pool, "kv_block_bytes": self.block_bytes,
                "num_gpu_blocks": self.num_blocks}


@dataclass(frozen=True)
class Sizing:
    """The numbers behind the flags, per GPU unless named otherwise."""

    weights_bytes: int  # the whole checkpoint
    weights_source: str
    weights_per_gpu: int
    kv_bytes_per_token: int
    reserve: memory.Reserve
    budget: int  # gpu_memory_utilization x the GPU's memory
    outside: int  # what the engine uses beyond its budget at run time
    pool: int  # KV pool bytes
    layout: kv_manager.KVLayout | None  # vLLM's hybrid manager's layout, where it decides
    block_size: int  # the engine's block (hybrids enlarge the flag's)
    num_blocks: int
    pool_tokens: int
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    seq_len: int  # the sequence concurrency is counted in: p95, else max_model_len
    blocks_per_seq: int
    blocks_at_max_len: int
    max_concurrency: int
    stages: tuple[StageSizing, ...] = ()  # pipeline stages (empty: one stage, one host)


@dataclass(frozen=True)
class Plan:
    """One engine replica's plan. as_dict() is kv_plan's result (README 'The planner')."""

    model: str
    options: PlanOptions
    geometry: Geometry
    sizing: Sizing
    flags: Mapping[str, FlagValue]  # flag (underscored) -> value, in the argv's order
    decided: tuple[str, ...]  # the flags the planner chose (the operator left them open)
    argv: tuple[str, ...]
    engine_stack: StackPlan
    hazards: tuple[Hazard, ...]
    notes: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not any(not h.overridden for h in self.hazards)

    def refusals(self) -> list[str]:
        return [h.message for h in self.hazards if not h.overridden]

    def as_dict(self) -> dict[str, Any]:
        o, z = self.options, self.sizing
        budget = (o.kv_cache_memory_bytes + z.weights_per_gpu + z.reserve.total
                  if o.kv_cache_memory_bytes is not None else z.budget)
        out = self._as_dict(budget)
        if not z.stages:
            return out
        # Pipeline parallelism: the top-level per-GPU numbers are the binding stage's (the
        # heaviest weights, the smallest pool); the stages follow.
        keys = list(out)
        at = keys.index("tensor_parallel_size") + 1
        items = list(out.items())
        items.insert(at, ("pipeline_parallel_size", o.pipeline_parallel_size))
        out = dict(items)
        out["pipeline"] = _pipeline_dict(o, z)
        return out

    def _as_dict(self, budget: int) -> dict[str, Any]:
        o, z = self.options, self.sizing
        return {
            "model": self.model,
            "gpu": {"name": o.gpu.name, "memory_bytes": o.gpu.memory_bytes, "fp8": o.gpu.fp8},
            "vllm_version": o.engine.label,
            "engine": o.engine.engine,
            "tensor_parallel_size": o.tensor_parallel_size,
            "dtype": o.dtype,
            "kv_cache_dtype": o.kv_cache_dtype,
            "kv_bytes_per_token": z.kv_bytes_per_token,
            "weights_bytes": z.weights_bytes,
            "weights_source": z.weights_source,
            "weights_bytes_per_gpu": z.weights_per_gpu,
            "activation_bytes_per_gpu": z.reserve.activation_bytes,
            "non_torch_bytes_per_gpu": z.reserve.non_torch_bytes,
            "reserved_bytes_per_gpu": z.reserve.total,
            "budget_bytes_per_gpu": budget,
            "outside_budget_bytes_per_gpu": z.outside,
            "kv_pool_bytes_per_gpu": z.pool,
            "block_size": z.block_size,
            "num_gpu_blocks": z.num_blocks,
            "max_concurrency_at_max_model_len": round(z.num_blocks / z.blocks_at_max_len, 4),
            "concurrency_at_p95": round(z.num_blocks / z.blocks_per_seq, 4),
            "layer_mix": self.geometry.layer_mix(),
            "kv_cache_manager": _layout_summary(z.layout),
            "kv_pool_tokens": z.pool_tokens,
            "kv_cache_sizing": o.kv_cache_sizing,
            "max_model_len": z.max_model_len,
            "max_concurrency": z.max_concurrency,
            "concurrency_seq_len": z.seq_len,
            "flags": dict(self.flags),
            "decided": list(self.decided),
            "argv": list(self.argv),
            "engine_stack": self.engine_stack.as_dict(),
            "hazards": [h.as_dict() for h in self.hazards],
            "ok": self.ok,
            "notes": list(self.notes),
        }


def _pipeline_dict(o: PlanOptions, z: Sizing) -> dict[str, Any]:
    partition = [s.stage.num_layers for s in z.stages]
    return {
        "pipeline_parallel_size": o.pipeline_parallel_size,
        "layer_partition": partition,
        "environment": ({"VLLM_PP_LAYER_PARTITION": ",".join(map(str, partition))}
                        if o.pp_layer_partition is not None else {}),
        "stages": [s.as_dict() for s in z.stages],
        "num_gpu_blocks": z.num_blocks,
        "binding_stage": min(z.stages, key=lambda s: s.num_blocks).stage.rank,
        "max_concurrency_at_max_model_len": round(z.num_blocks / z.blocks_at_max_len, 4),
        "max_concurrency": z.max_concurrency,
    }


def kv_plan(config: object, **opts: Any) -> dict[str, Any]:
    """Plan one engine replica. See README 'The planner' for the options and the result."""
    check_names(opts)
    cfg = load_config(config)
    geo = parse_geometry(cfg)
    options = parse_options(opts, geo)
    plan = build_plan(cfg, geo, options)
    result = plan.as_dict()
    if options.refuse_hazards and not plan.ok:
        raise HazardError(plan.refusals(), result)
    return result


def build_plan(cfg: Mapping[str, Any], geo: Geometry, options: PlanOptions) -> Plan:
    """The typed plan of validated options: sized, flagged, checked for hazards."""
    sizing = size(geo, options)
    flags = _flags(options, sizing)
    model = options.model or str(cfg.get("_name_or_path") or "model")
    stack = _engine_stack(options)
    found = [*_hazards(geo, options, sizing), *_stack_hazards(stack), *_version_hazards(options)]
    hazards = tuple(replace(h, reason=options.hazard_overrides.get(h.id)) for h in found)
    return Plan(model=model, options=options, geometry=geo, sizing=sizing, flags=flags,
                decided=_decided(options), argv=_argv(options, model, flags),
                engine_stack=stack, hazards=hazards, notes=_notes(options, sizing, flags))


@dataclass(frozen=True)
class _Unit:
    """The KV pool's unit as the engine lays it out."""

    cache: kv_manager.CacheOptions
    layout: kv_manager.KVLayout | None
    block: int
    block_bytes: int
    blocks_per_seq: int


@dataclass(frozen=True)
class _Memory:
    """One GPU's memory: the engine's budget, the weights' share, and what a max_num_seqs
    leaves for the KV pool (the sampler's profiling scratch grows with it)."""

    geo: Geometry
    options: PlanOptions
    budget: int
    weights_per_gpu: int
    # Pipeline stages (empty: one): each stage's weights per GPU and its block's cost in
    # layer pages (its largest projected KV-cache group).
    stages: tuple[pipeline.Stage, ...] = ()
    stage_weights: tuple[int, ...] = ()
    stage_group_layers: tuple[int, ...] = ()

    def reserve_and_pool(self, batched: int, num_seqs: int) -> tuple[memory.Reserve, int]:
        res, pools = self.reserve_and_pools(batched, num_seqs)
        return res, min(pools)

    def reserve_and_pools(self, batched: int,
                          num_seqs: int) -> tuple[memory.Reserve, tuple[int, ...]]:
        """The reserve and each stage's pool. Every stage reserves what one GPU of a whole
        model reserves (the sampler's scratch is the last stage's only: an upper bound)."""
        o = self.options
        tokens = memory.profile_tokens(max(batched, num_seqs), o.max_model_len,
                                       o.enable_chunked_prefill)
        res = memory.reserve(self.geo, o.engine, o.tensor_parallel_size, tokens, num_seqs,
                             DTYPE_BYTES[o.dtype])
        graphs = memory.in_budget_graph_bytes(o.engine, num_seqs, o.enforce_eager)
        if o.kv_cache_memory_bytes is not None:
            return res, (o.kv_cache_memory_bytes,) * max(1, len(self.stages))
        pools = tuple(max(0, self.budget - w - res.total - graphs)
                      for w in (self.stage_weights or (self.weights_per_gpu,)))
        if o.kv_cache_sizing == "planned":
            # One --kv-cache-memory-bytes for every rank: the smallest stage's pool.
            pools = (min(pools),) * len(pools)
        return res, pools

    def block_bytes(self, unit: _Unit) -> tuple[int, ...]:
        """One KV block per stage (one stage: the unit's)."""
        if not self.stages:
            return (unit.block_bytes,)
        if unit.layout is not None:
            page = unit.layout.page_bytes
        else:
            page = unit.block_bytes // self.geo.kv_layers
        return tuple(page * n for n in self.stage_group_layers)

    def num_blocks(self, pools: tuple[int, ...], unit: _Unit) -> int:
        """vLLM's num_blocks: each worker's own, then the smallest of all."""
        return min(pool // b for pool, b in zip(pools, self.block_bytes(unit), strict=True))


@dataclass(frozen=True)
class _Context:
    max_model_len: int
    seq_len: int
    blocks_per_seq: int
    pool_tokens: int
    max_num_seqs: int


def size(geo: Geometry, o: PlanOptions) -> Sizing:
    """Weights, reserve and KV pool per GPU; the largest safe max_num_seqs; the context."""
    tp = o.tensor_parallel_size
    weights, weights_source = _weights(geo, o)
    weights_per_gpu = math.ceil(weights / tp)
    kv_per_token = geo.kv_bytes_per_token(tp, o.kv_bytes)
    seq_len = o.workload.p95_tokens if o.workload else o.max_model_len
    unit = _unit(geo, o, kv_per_token, seq_len)
    batched = (o.max_num_batched_tokens if o.max_num_batched_tokens is not None
               else CHUNK_TOKENS if o.enable_chunked_prefill else max(o.max_model_len, 2048))
    unit = _with_batched(geo, o, unit, batched, seq_len)
    mem = _memory(geo, o, unit, weights_per_gpu)
    weights_per_gpu = max(mem.stage_weights or (weights_per_gpu,))
    seqs = (o.max_num_seqs if o.max_num_seqs is not None
            else _largest_safe_seqs(mem, unit, batched))
    res, pools = mem.reserve_and_pools(batched, seqs)
    pool = min(pools)
    if o.max_num_batched_tokens is None and batched < seqs:
        batched = seqs
        unit = _with_batched(geo, o, unit, batched, seq_len)
    if o.max_num_batched_tokens is not None and batched < seqs:
        raise batched_below_seqs(batched, seqs)  # the max_num_seqs the planner picked
    num_blocks = mem.num_blocks(pools, unit)
    ctx = _fit_context(geo, o, unit, num_blocks, seq_len, seqs)
    stages = tuple(StageSizing(stage, w, p, b, p // b) for stage, w, p, b in zip(
        mem.stages, mem.stage_weights, pools, mem.block_bytes(unit), strict=False))
    blocks_at_max_len = (unit.layout.blocks_per_request(ctx.max_model_len)
                         if unit.layout is not None else -(-ctx.max_model_len // unit.block))
    return Sizing(
        weights_bytes=weights, weights_source=weights_source, weights_per_gpu=weights_per_gpu,
        kv_bytes_per_token=kv_per_token, reserve=res, budget=mem.budget,
        outside=memory.outside_budget_bytes(o.engine, ctx.max_num_seqs, o.enforce_eager),
        pool=pool, layout=unit.layout, block_size=unit.block, num_blocks=num_blocks,
        pool_tokens=ctx.pool_tokens, max_model_len=ctx.max_model_len,
        max_num_seqs=ctx.max_num_seqs, max_num_batched_tokens=batched, seq_len=ctx.seq_len,
        blocks_per_seq=ctx.blocks_per_seq, blocks_at_max_len=blocks_at_max_len,
        max_concurrency=num_blocks // ctx.blocks_per_seq, stages=stages,
    )


def _memory(geo: Geometry, o: PlanOptions, unit: _Unit, weights_per_gpu: int) -> _Memory:
    """The GPU's memory; with pipeline parallelism, each stage's weights and block cost."""
    budget = int(o.gpu.memory_bytes * o.gpu_memory_utilization)
    if o.pipeline_parallel_size == 1:
        return _Memory(geo, o, budget, weights_per_gpu)
    stages, per_gpu = stage_weights_per_gpu(geo, o, o.pipeline_parallel_size,
                                            o.tensor_parallel_size)
    mtp = _mtp_layers(geo, o)
    hybrid = unit.layout.hybrid_manager if unit.layout is not None else False
    group_size = unit.layout.group_size if unit.layout is not None else geo.kv_layers
    kinds = pipeline.kv_kinds(geo, mtp, hybrid)
    return _Memory(geo, o, budget, weights_per_gpu, stages, per_gpu,
                   pipeline.stage_group_layers(kinds, group_size, stages))


def _mtp_layers(geo: Geometry, o: PlanOptions) -> int:
    """The drafter's attention layers (MTP methods): the last stage's KV cache holds them."""
    return geo.mtp_layers if o.cache.spec_method in kv_manager.MTP_METHODS else 0


def stage_weights_per_gpu(geo: Geometry, o: PlanOptions, pp: int,
                          tp: int) -> tuple[tuple[pipeline.Stage, ...], tuple[int, ...]]:
    """The stages of a tp x pp engine and each one's weight bytes per GPU."""
    partition = o.pp_layer_partition if pp == o.pipeline_parallel_size else None
    stages = pipeline.split(geo, pp, partition, _mtp_layers(geo, o))
    linear, embed = _weight_parts(geo, o)
    totals = pipeline.stage_weights(geo, stages, linear, embed, o.weights_bytes)
    return stages, tuple(math.ceil(t / tp) for t in totals)


def _weight_parts(geo: Geometry, o: PlanOptions) -> tuple[float, float]:
    """(the decoder layers' bytes, one vocab x hidden matrix's bytes), estimated."""
    linear, _embed = geo.parameter_counts()
    dtype_bytes = DTYPE_BYTES[o.dtype]
    return (linear * (geo.weight_bits / 8 if geo.weight_bits else dtype_bytes),
            float(geo.vocab_size * geo.hidden_size * dtype_bytes))


def _weights(geo: Geometry, o: PlanOptions) -> tuple[int, str]:
    """The checkpoint's bytes: given, else estimated from the parameter count."""
    if o.weights_bytes is not None:
        return o.weights_bytes, o.weights_source
    linear, embed = geo.parameter_counts()
    dtype_bytes = DTYPE_BYTES[o.dtype]
    linear_bytes = linear * (geo.weight_bits / 8 if geo.weight_bits else dtype_bytes)
    return math.ceil(linear_bytes + embed * dtype_bytes), o.weights_source


def _unit(geo: Geometry, o: PlanOptions, kv_per_token: int, seq_len: int) -> _Unit:
    """Full attention: the flag's block. Hybrid geometries (sliding windows, linear
    attention, MTP drafts): vLLM's hybrid KV-cache manager decides the block, the pool's
    unit and each request's blocks."""
    block = o.block_size
    if not o.uses_kv_manager:
        return _Unit(o.cache, None, block, kv_per_token * block, -(-seq_len // block))
    layout = kv_manager.layout(geo, o.tensor_parallel_size, o.cache, o.engine.version)
    return _Unit(o.cache, layout, layout.block_size, layout.bytes_per_block,
                 layout.blocks_per_request(seq_len))


def _with_batched(geo: Geometry, o: PlanOptions, unit: _Unit, batched: int,
                  seq_len: int) -> _Unit:
    """The sliding-window reservation counts the in-flight batched tokens: lay out again."""
    if unit.layout is None or not unit.layout.sliding_window or \
            batched == unit.cache.max_num_batched_tokens:
        return unit
    cache = replace(unit.cache, max_num_batched_tokens=batched)
    layout = kv_manager.layout(geo, o.tensor_parallel_size, cache, o.engine.version)
    return replace(unit, cache=cache, layout=layout,
                   blocks_per_seq=layout.blocks_per_request(seq_len))


def _largest_safe_seqs(mem: _Memory, unit: _Unit, batched: int) -> int:
    """The largest max_num_seqs whose p95 sequences fit the slack-reduced pool. The pool
    shrinks as max_num_seqs grows (the sampler's profiling scratch), so search."""
    def fits(n: int) -> bool:
        pools = mem.reserve_and_pools(batched, n)[1]
        return n * unit.blocks_per_seq <= int(POOL_SLACK * mem.num_blocks(pools, unit))

    low, high = 1, MAX_NUM_SEQS_CAP
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if fits(mid) else (low, mid - 1)
    return low


def _fit_context(geo: Geometry, o: PlanOptions, unit: _Unit, num_blocks: int, seq_len: int,
                 seqs: int) -> _Context:
    """The pool's token count; without max_model_len or a workload, the longest context the
    pool holds (and the max_num_seqs that context leaves, unless given)."""
    block, layout = unit.block, unit.layout
    max_model_len, blocks_per_seq = o.max_model_len, unit.blocks_per_seq
    pool_tokens = num_blocks * block
    open_context = (not o.max_model_len_set and o.workload is None
                    and geo.max_position_embeddings is not None)
    if layout is not None:
        # The token count vLLM 0.21+ logs: concurrency at max_model_len x max_model_len.
        # vLLM holds one block back (the null block) when it checks that a request fits.
        longest = layout.longest_request(num_blocks - 1, max_model_len)
        pool_tokens = int(layout.concurrency(num_blocks, max_model_len) * max_model_len) \
            if longest >= max_model_len else longest
        if open_context and longest > 0:
            max_model_len = max(block, longest)
            blocks_per_seq = layout.blocks_per_request(max_model_len)
            seq_len = max_model_len
            pool_tokens = int(layout.concurrency(num_blocks, max_model_len) * max_model_len)
            if o.max_num_seqs is None:
                seqs = max(1, min(MAX_NUM_SEQS_CAP,
                                  int(POOL_SLACK * num_blocks) // blocks_per_seq))
    elif open_context and pool_tokens > 0:
        # No workload: serve the longest context the pool can hold, block-aligned.
        max_model_len = max(block, min(max_model_len, pool_tokens))
        blocks_per_seq = -(-max_model_len // block)
        seq_len = max_model_len
        if o.max_num_seqs is None:
            seqs = max(1, min(MAX_NUM_SEQS_CAP, int(POOL_SLACK * num_blocks) // blocks_per_seq))
    return _Context(max_model_len, seq_len, blocks_per_seq, pool_tokens, seqs)


def _flags(o: PlanOptions, z: Sizing) -> Mapping[str, FlagValue]:
    """The engine flags the planner decides, in the argv's order."""
    flags: dict[str, FlagValue] = {"tensor_parallel_size": o.tensor_parallel_size}
    if o.pipeline_parallel_size > 1:
        flags["pipeline_parallel_size"] = o.pipeline_parallel_size
    if o.kv_cache_memory_bytes is not None:
        flags["kv_cache_memory_bytes"] = o.kv_cache_memory_bytes
    elif o.kv_cache_sizing == "planned":  # 0.34+: the plan's pool, exactly
        flags["kv_cache_memory_bytes"] = z.pool
    else:
        flags["gpu_memory_utilization"] = round(o.gpu_memory_utilization, 4)
    flags.update({
        "max_model_len": z.max_model_len,
        "max_num_seqs": z.max_num_seqs,
        "max_num_batched_tokens": z.max_num_batched_tokens,
        "enable_chunked_prefill": o.enable_chunked_prefill,
        "kv_cache_dtype": o.kv_cache_dtype,
        "block_size": o.block_size,
    })
    if o.dtype_set or o.float32_served_as_bfloat16:
        flags["dtype"] = o.dtype
    if o.quantization is not None:
        flags["quantization"] = o.quantization
    if o.enforce_eager:
        flags["enforce_eager"] = True
    if o.cache.enable_prefix_caching is not None:
        flags["enable_prefix_caching"] = o.cache.enable_prefix_caching
    flags.update(_cache_flags(o))
    return MappingProxyType(flags)


def _cache_flags(o: PlanOptions) -> dict[str, FlagValue]:
    cache = o.cache
    flags: dict[str, FlagValue] = {}
    if cache.spec_method is not None:
        flags["speculative_config"] = json.dumps(
            {"method": cache.spec_method,
             "num_speculative_tokens": cache.num_speculative_tokens}, separators=(",", ":"))
    if o.mamba_ssm_cache_dtype_set:
        flags["mamba_ssm_cache_dtype"] = cache.mamba_ssm_cache_dtype
    if cache.disable_hybrid_kv_cache_manager:
        flags["disable_hybrid_kv_cache_manager"] = True
    return flags


def _decided(o: PlanOptions) -> tuple[str, ...]:
    """The flags the planner chose because the operator left them open."""
    decided = {
        "gpu_memory_utilization": not o.gpu_memory_utilization_set,
        "max_model_len": not o.max_model_len_set,
        "max_num_seqs": o.max_num_seqs is None,
        "max_num_batched_tokens": o.max_num_batched_tokens is None,
        "enable_chunked_prefill": not o.enable_chunked_prefill_set,
        "kv_cache_dtype": not o.kv_cache_dtype_set,
    }
    return tuple(sorted(k for k, v in decided.items() if v))


def _engine_stack(o: PlanOptions) -> StackPlan:
    """What the engine's wheel needs from the driver and, when the driver is given, why it
    cannot run it ('' when it can)."""
    package = o.engine_package
    row = engine_stack(o.vllm_version)
    cuda = row.cuda if package == "vllm" else None
    min_branch = min_driver_for_cuda(cuda)[0] if cuda else None
    driver: DriverStack | None = None
    problem = ""
    if o.driver is not None:
        resolved = o.driver.resolved_version
        head = resolved.split(".", 1)[0]
        driver = DriverStack(source=o.driver.source, version=resolved,
                             branch=int(head) if head.isdigit() else None,
                             cuda_compat=o.driver.cuda_compat)
        problem = stack_problem(vllm_version=o.vllm_version, engine_package=package,
                                driver_version=resolved, driver_source=o.driver.source,
                                gpu=o.gpu.name, cuda_compat=o.driver.cuda_compat)
    return StackPlan(package=package, vllm=row.vllm,
                     torch=row.torch if package == "vllm" else None, cuda=cuda,
                     min_driver_branch=min_branch, driver=driver, problem=problem)


def _gib(n: int | float) -> str:
    return f"{n / GIB:.2f} GiB"


def _hazard(hazard_id: str, message: str) -> Hazard:
    return Hazard(hazard_id, f"{hazard_id}: {message}")


def _hazards(geo: Geometry, o: PlanOptions, z: Sizing) -> list[Hazard]:
    """The memory, context and scheduling hazards of the sized plan (incidents #1-#3)."""
    found = [*_memory_hazards(geo, o, z), *_model_context_hazards(geo, z)]
    if z.pool_tokens == 0:
        return found  # nothing fits: the pool hazards below would only repeat it
    return [*found, *_pool_hazards(o, z), *_ttft_hazards(o, z)]


def _fit_fix(geo: Geometry, o: PlanOptions, z: Sizing, room: int) -> str:
    """The smallest engine that fits: more tensor parallelism inside one host (up to
    HOST_GPUS), else the fewest hosts (pipeline stages) of HOST_GPUS GPUs; '' if none."""
    tp, pp, kv_mem = o.tensor_parallel_size, o.pipeline_parallel_size, o.kv_cache_memory_bytes
    limit = room * POOL_SLACK
    extra = z.reserve.total + (kv_mem or 0)

    def fits(t: int, p: int) -> bool:
        if p == 1:
            return z.weights_per_gpu * tp // t + extra < limit
        return max(stage_weights_per_gpu(geo, o, p, t)[1]) + extra < limit

    wider = [n for n in HOST_TP_SIZES if n > tp and fits(n, pp)]
    if wider:
        return f"tensor_parallel_size {wider[0]}, "
    host = max(tp, HOST_GPUS)
    for p in range(pp + 1, min(pipeline.MAX_PIPELINE, geo.num_layers) + 1):
        if fits(host, p):
            also = "" if host == tp else f"tensor_parallel_size {host} and "
            return f"{also}pipeline_parallel_size {p} ({p} hosts of {host} x {o.gpu.name}), "
    return ""


def _memory_hazards(geo: Geometry, o: PlanOptions, z: Sizing) -> list[Hazard]:
    """weights_exceed_memory (the engine cannot start) and runtime_oom (incident #1)."""
    found: list[Hazard] = []
    gpu, outside, kv_mem = o.gpu, z.outside, o.kv_cache_memory_bytes
    reserve_total = z.reserve.total
    need = z.weights_per_gpu + reserve_total + (kv_mem or 0)
    room = z.budget if kv_mem is None else gpu.memory_bytes - outside
    if need > room:
        fix = _fit_fix(geo, o, z, room)
        where = ""
        if z.stages:
            heaviest = max(z.stages, key=lambda s: s.weights_per_gpu).stage
            where = f" on pipeline stage {heaviest.rank} (layers {heaviest.start}-" \
                    f"{heaviest.end - 1})"
        found.append(_hazard(
            "weights_exceed_memory",
            f"weights {_gib(z.weights_per_gpu)} + engine reserve {_gib(reserve_total)}"
            + (f" + KV cache {_gib(kv_mem)}" if kv_mem else "")
            + f" per GPU{where} exceed the {_gib(room)} available on {gpu.name}; the engine "
            f"cannot start. Fix: {fix}a quantized checkpoint, or a larger GPU"))
    headroom = gpu.memory_bytes - (z.budget if kv_mem is None else need)
    util = o.gpu_memory_utilization
    if kv_mem is None and util >= UTILIZATION_CEILING:
        found.append(_hazard(
            "runtime_oom",
            f"gpu_memory_utilization {util} leaves {_gib(headroom)} per GPU for CUDA graphs and "
            "long-prefill activations; startup succeeds and requests then die with CUDA out of "
            "memory (incident #1, the silent OOM). Fix: gpu_memory_utilization "
            f"{RECOMMENDED_UTILIZATION}"))
    elif headroom < outside:
        found.append(_hazard(
            "runtime_oom",
            f"only {_gib(headroom)} per GPU stays outside the engine's budget but CUDA graphs "
            f"and runtime activations need about {_gib(outside)} (incident #1, the silent OOM). "
            "Fix: lower " + ("gpu_memory_utilization" if kv_mem is None else
                             "kv_cache_memory_bytes") + " or set enforce_eager"))
    return found


def _model_context_hazards(geo: Geometry, z: Sizing) -> list[Hazard]:
    positions = geo.max_position_embeddings
    if positions is None or z.max_model_len <= positions:
        return []
    return [_hazard(
        "context_exceeds_model",
        f"max_model_len {z.max_model_len} exceeds the model's {positions} "
        "positions; outputs past them are garbage (rope scaling in config.json is what "
        "extends them). Fix: max_model_len " + str(positions))]


def _pool_hazards(o: PlanOptions, z: Sizing) -> list[Hazard]:
    """context_exceeds_pool, and preemption_storm (incident #2)."""
    found: list[Hazard] = []
    if z.max_model_len > z.pool_tokens:
        found.append(_hazard(
            "context_exceeds_pool",
            f"max_model_len {z.max_model_len} exceeds the {z.pool_tokens}-token KV pool; the "
            f"engine refuses to start or one request can never be scheduled. Fix: max_model_len "
            f"<= {z.pool_tokens}, fp8 KV cache, or more tensor parallelism"))
    seqs, need = z.max_num_seqs, z.max_num_seqs * z.blocks_per_seq
    if need > z.num_blocks:
        found.append(_hazard(
            "preemption_storm",
            f"max_num_seqs {seqs} x {z.seq_len} tokens (p95 sequence) needs "
            f"{need} KV blocks but the pool holds {z.num_blocks}; the scheduler "
            f"admits more than fit and evicts running sequences (incident #2, the preemption "
            f"storm). Fix: max_num_seqs <= {z.max_concurrency}"
            + ("" if o.kv_cache_dtype.startswith("fp8")
               else ", or kv_cache_dtype fp8 to double the pool")))
    return found


def _ttft_hazards(o: PlanOptions, z: Sizing) -> list[Hazard]:
    """ttft_spike (incident #3): long prompts without chunked prefill, or huge chunks."""
    prompt_p95 = o.workload.prompt_p95 if o.workload else z.max_model_len
    batched = z.max_num_batched_tokens
    if prompt_p95 <= LONG_PROMPT_TOKENS:
        return []
    if not o.enable_chunked_prefill:
        return [_hazard(
            "ttft_spike",
            f"p95 prompts of {prompt_p95} tokens without chunked prefill monopolise whole engine "
            "steps and every short request waits behind them (incident #3, the TTFT spike). "
            f"Fix: enable_chunked_prefill true with max_num_batched_tokens {CHUNK_TOKENS}")]
    if batched > MAX_SAFE_CHUNK:
        return [_hazard(
            "ttft_spike",
            f"prefill chunks of {batched} tokens are too large to interleave with decodes "
            f"(incident #3, the TTFT spike). Fix: max_num_batched_tokens {CHUNK_TOKENS}")]
    return []


def _stack_hazards(stack: StackPlan) -> list[Hazard]:
    if not stack.problem:
        return []
    return [_hazard("driver_cannot_run_engine", stack.problem)]


def _version_hazards(o: PlanOptions) -> list[Hazard]:
    if o.engine.version <= NEWEST_KNOWN:
        return []
    newest = ".".join(map(str, NEWEST_KNOWN))
    return [Hazard(
        "unknown_vllm_version",
        f"unknown_vllm_version: vLLM {o.engine.label} is newer than the flag and "
        f"memory table ({newest}): flags it removed or renamed, and a changed "
        "memory budget, would go unnoticed until the engine fails on the host. "
        f"Fix: plan for vLLM {newest} or older (vllm_install_version), or check the "
        "release notes against "
        "vllm_planner/versions.py and raise NEWEST_KNOWN")]


def _notes(o: PlanOptions, z: Sizing, flags: Mapping[str, FlagValue]) -> tuple[str, ...]:
    notes: list[str] = [note for name in [*flags, *o.extra_flags]
                        if (note := flag_deprecation(name, o.engine.version))]
    if o.float32_served_as_bfloat16:
        notes.append("float32 checkpoint: vLLM serves it in bfloat16 unless dtype is set")
    if o.workload is not None and o.workload.concurrency > z.max_concurrency:
        notes.append(f"workload concurrency {o.workload.concurrency} exceeds the "
                     f"{z.max_concurrency} p95-length sequences one replica holds: the excess "
                     "queues (the plateau); add replicas"
                     + ("" if o.kv_cache_dtype.startswith("fp8") else " or an fp8 KV cache"))
    if o.kv_cache_sizing == "planned":
        notes.append(f"vLLM {o.engine.label} sizes the KV pool after CUDA graph capture by "
                     "default (the extensible KV cache); the plan writes its pool as "
                     "--kv-cache-memory-bytes, which turns that off: the pool is exactly the "
                     "plan's (kv_cache_sizing: measured lets the engine measure, the plan's "
                     "pool then a lower bound)")
    elif o.kv_cache_sizing == "measured":
        notes.append(f"vLLM {o.engine.label} measures the KV pool after CUDA graph capture "
                     "and warm-up (the extensible KV cache): the plan's pool and max_num_seqs "
                     "rest on a lower bound (graphs counted inside the budget); the "
                     "post-deploy check reads the pool the engine settles on")
    if z.layout is not None and z.layout.block_size != o.block_size:
        notes.append(f"vLLM enlarges the attention block from {o.block_size} to "
                     f"{z.layout.block_size} tokens so one attention page holds one "
                     f"linear-attention state ({z.layout.state_page_bytes:,} bytes per layer)")
    return tuple(notes)


def _argv(o: PlanOptions, model: str, flags: Mapping[str, FlagValue]) -> tuple[str, ...]:
    engine = o.engine
    argv = [*engine.entrypoint, model]
    for opt, text in (("served_model_name", o.served_model_name), ("host", o.host),
                      ("port", o.port)):
        if text is not None:
            argv += [f"--{opt.replace('_', '-')}", text]
    for key, value in [*flags.items(), *o.extra_flags.items()]:
        name = key.replace("_", "-")
        if name == "enable-chunked-prefill" and value is False:
            if engine.version >= CHUNK_FLAG_NEGATABLE_SINCE:
                argv.append("--no-enable-chunked-prefill")
            continue
        if not engine.supports(name):  # defensive: a flag the table knows this release lacks
            raise PlanError(name, f"vLLM {engine.label} has no --{name}", "remove it")
        if value is True:
            argv.append(f"--{name}")
        elif value is False:
            continue
        elif isinstance(value, tuple):
            argv += [f"--{name}", *value]
        else:
            argv += [f"--{name}", str(value)]
    return tuple(argv)


def _layout_summary(kv_layout: kv_manager.KVLayout | None) -> dict[str, Any] | None:
    if kv_layout is None:
        return None
    return {
        "groups": kv_layout.describe(),
        "group_size": kv_layout.group_size,
        "page_bytes": kv_layout.page_bytes,
        "state_page_bytes": kv_layout.state_page_bytes,
        "state_blocks_per_request": kv_layout.state_blocks_per_request,
        "mamba_cache_mode": kv_layout.mamba_cache_mode,
        "prefix_caching": kv_layout.prefix_caching,
        "sliding_window": kv_layout.sliding_window,
        "hybrid_manager": kv_layout.hybrid_manager,
    }
