"""vLLM's KV-cache manager, mirrored: block size, groups, blocks and concurrency per layer kind.

Pure arithmetic over a :class:`~vllm_planner.model.Geometry`, following the V1 engine's code
(vllm 0.32.0, the pinned release, unless a rule says otherwise):

* Specs. Full attention: ``FullAttentionSpec`` (page ``2 x kv_heads/rank x head_dim x bytes x
  block``; MLA: one latent, no factor 2). Sliding window: ``SlidingWindowSpec`` (same page).
  Gated DeltaNet: ``MambaSpec`` with the conv state ``(kernel - 1 + num_spec) x conv_dim/TP``
  and the SSM state ``Hv/TP x Dv x Dk`` (``MambaStateShapeCalculator.
  gated_delta_net_state_shape``); conv in the model dtype, SSM in ``mamba_ssm_cache_dtype``
  (0.17+; Qwen3.5 copies its config's ``mamba_ssm_dtype`` into it).
* Block size (``Platform._align_hybrid_block_size``): with linear layers the attention block
  becomes ``A x cdiv(mamba_page, A x attn_page_per_token)``, ``A = max(16, block_size)``, and
  the state page is padded to the attention page. 0.33+ on SM90 with prefix caching ("align"
  mode): ``A`` is also a multiple of 64, the FlashInfer GDN prefill checkpoint alignment.
* Groups (``_get_kv_cache_groups_uniform_page_size``): layers bucketed by spec; the group size
  is the smallest bucket (the largest when it is under 1.5x the smallest); each bucket splits
  into ``cdiv(n, group_size)`` groups, padded. One pool: ``num_blocks = available //
  (group_size x page)``.
* Per request (``max_memory_usage_bytes``): full ``cdiv(len, block)``; sliding
  ``cdiv(min(window - 1 + extra + in_flight, len), block) + 1`` with in-flight tokens
  ``2 x max_num_batched_tokens`` from 0.26 (async scheduling), ``max_num_batched_tokens``
  before (pipeline parallelism: ``pp`` batches, ``pp + 1`` from 0.34); state
  ``1 + num_spec`` blocks, ``2 + num_spec`` with prefix caching ("align" mode),
  one more from 0.33 where the layers export prefill checkpoints (FlashInfer GDN, SM90).
* ``max_concurrency = num_blocks / sum of per-request blocks over groups``
  (``get_max_concurrency_for_kv_cache_config``), the float vLLM logs as "Maximum concurrency
  for N tokens per request".
* ``disable_hybrid_kv_cache_manager``: sliding layers become full attention (one group);
  state-space hybrids cannot start without the hybrid manager.

tests/unit/plugins/plugin_utils/vllm_planner/test_kv_oracle.py checks these numbers against vLLM's
own functions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from .errors import PlanError
from .model import DTYPE_BYTES, FULL, GDN_MODEL_TYPES, LINEAR, SLIDING, Geometry

Version = tuple[int, ...]  # versions.Version: (0, 32, 0), (0, 10, 1, 1)

KERNEL_BLOCK = 16  # smallest kernel block of FlashAttention / FlashInfer / Triton on CUDA
# FLASHINFER_GDN_CHECKPOINT_ALIGNMENT (vllm/v1/attention/backends/gdn_attn.py, 0.33+)
GDN_CHECKPOINT_ALIGNMENT = 64
GROUP_SIZE_SLACK = 1.5  # vLLM pads the smaller bucket up when max < 1.5 x min
# Releases where a rule changed (read in the released wheels, ../shared notes, and 0.32.0).
SSM_DTYPE_FLAG_SINCE = (0, 17, 0)  # GDN honours --mamba-ssm-cache-dtype; Qwen3.5 hook
HYBRID_PREFIX_CACHING_SINCE = (0, 26, 0)  # prefix caching on by default for hybrids
IN_FLIGHT_TOKENS_SINCE = (0, 26, 0)  # SWA reservation counts 2 x max_num_batched_tokens
IN_FLIGHT_PP_PLUS_ONE_SINCE = (0, 34, 0)  # async scheduling: pp + 1 batches in flight
LINEAR_SINCE = (0, 11, 0)  # oldest release whose hybrid manager this table models
MTP_METHODS = frozenset({"mtp", "qwen3_next_mtp", "qwen3_5_mtp", "deepseek_mtp"})
SPEC_METHODS = MTP_METHODS | {"ngram"}
MAMBA_DTYPES = ("auto", "float32", "bfloat16", "float16")


@dataclass(frozen=True)
class CacheOptions:
    """The engine flags that shape the KV-cache manager."""

    kv_bytes: int  # bytes per KV element (fp8 = 1)
    model_dtype: str  # canonical dtype the engine runs in
    block_size: int = 16
    enable_prefix_caching: bool | None = None  # None: the release's default
    spec_method: str | None = None
    num_speculative_tokens: int = 0
    mamba_ssm_cache_dtype: str = "auto"
    disable_hybrid_kv_cache_manager: bool = False
    max_num_batched_tokens: int = 8192
    # The Gated DeltaNet prefill checkpoint alignment in "align" mode (64 with FlashInfer's
    # GDN prefill kernel, vLLM 0.33+ on SM90; 0 = the layers export no checkpoints).
    gdn_checkpoint_alignment: int = 0
    # Pipeline stages: more batches in flight (VllmConfig.max_concurrent_batches).
    pipeline_parallel_size: int = 1


@dataclass(frozen=True)
class Group:
    kind: str  # FULL, SLIDING or LINEAR
    layers: int  # real layers (the rest of group_size is padding)


@dataclass(frozen=True)
class KVLayout:
    """What vLLM's KV-cache manager makes of one geometry on one rank."""

    block_size: int
    page_bytes: int  # one block of one layer, after unification/padding
    group_size: int
    groups: tuple[Group, ...]
    prefix_caching: bool
    mamba_cache_mode: str  # "none" or "align" ("-" without linear layers)
    state_blocks_per_request: int  # per linear group
    sliding_window: int | None
    sliding_tokens: int  # window - 1 + extra + in-flight tokens
    state_page_bytes: int  # unpadded state page (0 without linear layers)
    hybrid_manager: bool

    @property
    def bytes_per_block(self) -> int:
        """One block across a group's layers: the pool's unit."""
        return self.page_bytes * self.group_size

    def num_blocks(self, available_bytes: int) -> int:
        return max(0, available_bytes) // self.bytes_per_block

    def blocks_per_request(self, seq_len: int) -> int:
        total = 0
        for group in self.groups:
            if group.kind == FULL:
                total += -(-seq_len // self.block_size)
            elif group.kind == SLIDING:
                total += -(-min(self.sliding_tokens, seq_len) // self.block_size) + 1
            else:
                total += self.state_blocks_per_request
        return total

    def concurrency(self, num_blocks: int, seq_len: int) -> float:
        return num_blocks / self.blocks_per_request(seq_len)

    def longest_request(self, num_blocks: int, limit: int) -> int:
        """Longest sequence (<= limit, block-aligned) one request can hold in the pool."""
        if self.blocks_per_request(self.block_size) > num_blocks:
            return 0
        low, high = 1, max(1, -(-limit // self.block_size))
        while low < high:
            mid = (low + high + 1) // 2
            if self.blocks_per_request(min(limit, mid * self.block_size)) <= num_blocks:
                low = mid
            else:
                high = mid - 1
        return min(limit, low * self.block_size)

    def describe(self) -> list[str]:
        counts: dict[str, int] = {}
        for group in self.groups:
            counts[group.kind] = counts.get(group.kind, 0) + 1
        return [f"{n} x {kind}" for kind, n in counts.items()]


def speculative(value: object, geo: Geometry) -> tuple[str | None, int]:
    """Validate speculative_config ({method, num_speculative_tokens}) as vLLM takes it."""
    if value is None:
        return None, 0
    field = "speculative_config"
    if not isinstance(value, Mapping):
        raise PlanError(field, f"must be a mapping, got {type(value).__name__}",
                        "e.g. {method: mtp, num_speculative_tokens: 2}")
    unknown = sorted(set(map(str, value)) - {"method", "num_speculative_tokens"})
    if unknown:
        raise PlanError(f"{field}.{unknown[0]}", "is not planned",
                        "give only method and num_speculative_tokens")
    method = value.get("method")
    if not isinstance(method, str) or method not in SPEC_METHODS:
        raise PlanError(f"{field}.method", f"{method!r} is not a method the planner sizes",
                        "use one of " + ", ".join(sorted(SPEC_METHODS)))
    if method in MTP_METHODS and geo.mtp_layers == 0:
        raise PlanError(f"{field}.method",
                        f"{method} needs the checkpoint's MTP layers, and this config has none",
                        "use ngram, or a checkpoint that ships MTP layers")
    tokens = value.get("num_speculative_tokens")
    if isinstance(tokens, str) and tokens.strip().isdigit():  # extra-vars arrive as text
        tokens = int(tokens)
    if isinstance(tokens, bool) or not isinstance(tokens, int) or not 1 <= tokens <= 16:
        raise PlanError(f"{field}.num_speculative_tokens",
                        f"must be a whole number from 1 to 16, got {tokens!r}",
                        "use 1 to 3 for MTP")
    return method, tokens


def mamba_ssm_dtype(value: object) -> str:
    if value is None:
        return "auto"
    if not isinstance(value, str) or value not in MAMBA_DTYPES:
        raise PlanError("mamba_ssm_cache_dtype", f"unknown dtype {value!r}",
                        "use one of " + ", ".join(MAMBA_DTYPES))
    return value


def prefix_caching_default(geo: Geometry, version: Version) -> bool:
    """vLLM's default for --enable-prefix-caching (V1): on, except hybrids before 0.26."""
    if geo.count(LINEAR) and version < HYBRID_PREFIX_CACHING_SINCE:
        return False
    return True


def _state_page(geo: Geometry, tp: int, opts: CacheOptions, version: Version) -> int:
    lin = geo.linear
    if lin is None:  # callers pass only geometries with linear layers
        raise AssertionError("_state_page needs a geometry with linear-attention layers")
    num_spec = opts.num_speculative_tokens
    conv_dim = lin.conv_dim()
    if conv_dim % tp or lin.num_value_heads % tp:
        raise PlanError("tensor_parallel_size",
                        f"{tp} does not divide the linear-attention state (conv {conv_dim}, "
                        f"{lin.num_value_heads} value heads)",
                        "choose a tensor parallel size that divides both")
    conv = (lin.conv_kernel - 1 + num_spec) * (conv_dim // tp)
    ssm = (lin.num_value_heads // tp) * lin.value_head_dim * lin.key_head_dim
    conv_bytes = DTYPE_BYTES[opts.model_dtype]
    ssm_dtype = opts.mamba_ssm_cache_dtype
    if version >= SSM_DTYPE_FLAG_SINCE:
        if ssm_dtype == "auto" and lin.ssm_dtype is not None and geo.model_type.startswith(
                "qwen3_5"):
            ssm_dtype = lin.ssm_dtype
    else:
        ssm_dtype = "auto"  # 0.11-0.16: both states in the model dtype
    ssm_bytes = conv_bytes if ssm_dtype == "auto" else DTYPE_BYTES[ssm_dtype]
    return conv * conv_bytes + ssm * ssm_bytes


def in_flight_batches(version: Version, pp: int) -> int:
    """VllmConfig.max_concurrent_batches with async scheduling (the default): 2 without
    pipeline parallelism; with it, pp (0.26-0.33, the V1 model runner), pp + 1 (0.34+)."""
    if version >= IN_FLIGHT_PP_PLUS_ONE_SINCE:
        return pp + 1
    if version >= IN_FLIGHT_TOKENS_SINCE:
        return 2 if pp == 1 else pp
    return 1


def layout(geo: Geometry, tp: int, opts: CacheOptions, version: Version) -> KVLayout:
    """The KV-cache layout vLLM builds for this geometry on one tensor-parallel rank."""
    n_full = geo.count(FULL)
    n_sliding = geo.count(SLIDING)
    n_linear = geo.count(LINEAR)
    if opts.spec_method in MTP_METHODS:
        n_full += geo.mtp_layers  # the draft's attention layers join the full bucket
    hybrid_manager = not opts.disable_hybrid_kv_cache_manager
    if n_linear and version < LINEAR_SINCE:
        raise PlanError("vllm_version", f"the planner models linear-attention hybrids from "
                        f"vLLM {'.'.join(map(str, LINEAR_SINCE))}",
                        "plan for vLLM 0.11 or newer")
    if n_linear and not hybrid_manager:
        raise PlanError("disable_hybrid_kv_cache_manager",
                        "linear-attention (state-space) hybrids cannot start without the "
                        "hybrid KV-cache manager (vLLM cannot unify their KV-cache specs)",
                        "remove the option")
    if not hybrid_manager:
        n_full, n_sliding = n_full + n_sliding, 0

    attn_token = (geo.mla_latent_dim if geo.mla_latent_dim is not None else
                  2 * geo.kv_heads_per_rank(tp) * geo.head_dim) * opts.kv_bytes
    block = opts.block_size
    prefix = opts.enable_prefix_caching
    if prefix is None:
        prefix = prefix_caching_default(geo, version)
    state_page = 0
    mode = "-"
    state_blocks = 0
    if n_linear:
        state_page = _state_page(geo, tp, opts, version)
        align = max(KERNEL_BLOCK, block)
        if geo.is_mla:
            align = max(align, 128)
        checkpoints = bool(prefix and opts.gdn_checkpoint_alignment)
        if checkpoints:  # 0.33+: prefill checkpoints land on block boundaries
            align = math.lcm(align, opts.gdn_checkpoint_alignment)
        needed = align * -(-state_page // (align * attn_token))
        block = max(block, needed)
        mode = "align" if prefix else "none"
        state_blocks = (2 if prefix else 1) + opts.num_speculative_tokens + int(checkpoints)
    page = attn_token * block

    buckets = [(kind, n) for kind, n in ((FULL, n_full), (SLIDING, n_sliding),
                                         (LINEAR, n_linear)) if n]
    if len(buckets) == 1:
        group_size = buckets[0][1]
        groups: tuple[Group, ...] = (Group(buckets[0][0], group_size),)
    else:
        smallest = min(n for _kind, n in buckets)
        largest = max(n for _kind, n in buckets)
        group_size = largest if largest < smallest * GROUP_SIZE_SLACK else smallest
        grouped: list[Group] = []
        for kind, n in buckets:
            parts = -(-n // group_size)
            grouped += [Group(kind, len(range(i, n, parts))) for i in range(parts)]
        groups = tuple(grouped)

    in_flight = opts.max_num_batched_tokens * in_flight_batches(
        version, opts.pipeline_parallel_size)
    extra = opts.num_speculative_tokens - 1 if (
        opts.spec_method in MTP_METHODS and opts.num_speculative_tokens > 1
        and geo.mtp_layers > 1) else 0
    window = geo.sliding_window if n_sliding else None
    return KVLayout(
        block_size=block, page_bytes=page, group_size=group_size, groups=groups,
        prefix_caching=prefix, mamba_cache_mode=mode, state_blocks_per_request=state_blocks,
        sliding_window=window,
        sliding_tokens=(window - 1 + extra + in_flight) if window else 0,
        state_page_bytes=state_page, hybrid_manager=hybrid_manager,
    )


__all__ = ["GDN_MODEL_TYPES", "CacheOptions", "Group", "KVLayout", "layout", "speculative"]
