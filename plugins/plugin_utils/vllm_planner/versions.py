"""What each vLLM release accepts and how it budgets memory.

Fleets upgrade slowly, so the table reaches back to the 0.5/0.6 era of the operator's notes
(0.6.2) and forward to the release the project pins. Sources: vLLM's release notes and
engine arguments; the memory figures are calibrated against real start-up logs
(tests/data/vllm-startup-logs.jsonl) and rounded up, so the planner under-promises.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from .errors import PlanError
from .releases import RELEASES, release

# ansible-core depends on packaging, so every controller has it; ansible-test's import check
# runs plugins in an environment without it, where the planner must still import.
try:
    from packaging.version import InvalidVersion
    from packaging.version import Version as PackagingVersion
except ImportError as error:  # pragma: no cover - only without ansible-core's dependencies
    PACKAGING_ERROR: ImportError | None = error
else:
    PACKAGING_ERROR = None

# The version the project deploys by default (roles/vllm_server pins the same).
PINNED_VERSION = "0.33.0"
# Newest release whose flags and memory behaviour the table was checked against.
NEWEST_KNOWN = (0, 34, 0)
OLDEST_SUPPORTED = (0, 5, 0)

# A release's number: (0, 32, 0), or (0, 10, 1, 1) for vLLM's four-part 0.10.1.1. At least
# three parts (0.32 reads as (0, 32, 0)); a .postN release reads as the release it re-packs.
Version = tuple[int, ...]


def parse_version(value: object, field: str = "vllm_version") -> Version:
    """The release number of a final vLLM release (PEP 440, read by `packaging`).

    Accepts 0.32.0, v0.32.0, 0.32, 0.10.1.1 and post releases (0.6.1.post2: a final release,
    re-packed; the stack table lists them). Raises PlanError naming ``field`` for anything
    else: not a version, a pre-release (0.11.0rc1), a development build (0.33.0.dev12), a
    local build (0.32.0+cu130), an epoch, or a release older than OLDEST_SUPPORTED.
    """
    if PACKAGING_ERROR is not None:
        raise PlanError(field, f"the planner reads versions with the Python package "
                        f"'packaging', which this controller lacks ({PACKAGING_ERROR})",
                        "install ansible-core with its dependencies (pip install ansible-core)")
    text = value.strip() if isinstance(value, str) else None
    try:
        parsed = PackagingVersion(text) if text else None
    except InvalidVersion:
        parsed = None
    if parsed is None:
        quote = " in quotes (YAML reads 0.6 as a number)" if isinstance(value, int | float) else ""
        raise PlanError(
            field,
            f"cannot parse vLLM version {value!r}",
            f"use a release number such as {PINNED_VERSION} or v0.6.2.post1{quote}",
        )
    final = parsed.base_version + (f".post{parsed.post}" if parsed.post is not None else "")
    kind = ("a development build" if parsed.is_devrelease
            else "a pre-release" if parsed.is_prerelease
            else "a local build" if parsed.local is not None
            else "an epoch release" if parsed.epoch
            else None)
    if kind is not None:
        raise PlanError(
            field,
            f"{text} is {kind}; the planner knows final vLLM releases only",
            f"pin a final release such as {final if kind != 'an epoch release' else PINNED_VERSION}"
            " (the stack table and flag history are checked against releases on PyPI)",
        )
    version: Version = parsed.release + (0,) * (3 - len(parsed.release))
    if version < OLDEST_SUPPORTED:
        raise PlanError(
            field,
            f"vLLM {value} is older than the oldest supported release "
            f"{'.'.join(map(str, OLDEST_SUPPORTED))}",
            "upgrade the engine, or plan for 0.5.0 or newer",
        )
    return version


@dataclass(frozen=True)
class FlagSpec:
    """An engine flag whose history the planner knows: accepted in [since, until).

    The table is not a whitelist. A flag it does not list passes through to the argv
    unchanged; the installed engine's own parser judges it on the host before anything
    changes (roles/vllm_server, bin/vllm-check-args). The table refuses only what is
    known: a flag planned for a release older than the one that added it, or for a
    release from the one that removed it (or made it meaningless) on; `note` says why
    and what replaces it, and ends up in the refusal.
    """

    since: Version = (0, 0, 0)
    until: Version | None = None
    takes_value: bool = True
    note: str = ""

    def supported(self, version: Version) -> bool:
        return version >= self.since and (self.until is None or version < self.until)

    def refusal(self, name: str, version: Version) -> str | None:
        """Why `version` cannot take --name, or None where it can."""
        label = ".".join(map(str, version))
        why = f" ({self.note})" if self.note else ""
        if version < self.since:
            return (f"vLLM {label} has no --{name}: it arrived in "
                    f"{'.'.join(map(str, self.since))}{why}")
        if self.until is not None and version >= self.until:
            return f"vLLM {label} has no --{name}: removed in {'.'.join(map(str, self.until))}{why}"
        return None


V1_DEFAULT = (0, 8, 0)  # V1 engine is the default from 0.8.0; V0 code was removed in 0.11.0.
V0_REMOVED = (0, 11, 0)

# Flags the planner writes itself or knows the history of. Sources: vLLM's release notes
# (v0.11.0: "completes the removal of V0 engine"), vllm#21739 (--enable-log-requests
# replaces --disable-log-requests, 0.10.2), vllm#29402 (--disable-log-requests removed,
# 0.12.0), vllm#36216 (--swap-space removed, 0.18.0; unused by V1 since V0 went).
FLAGS: dict[str, FlagSpec] = {
    "model": FlagSpec(),
    "served-model-name": FlagSpec(),
    "host": FlagSpec(),
    "port": FlagSpec(),
    "api-key": FlagSpec(note="secret: pass VLLM_API_KEY in the environment instead"),
    "tensor-parallel-size": FlagSpec(),
    "gpu-memory-utilization": FlagSpec(),
    "max-model-len": FlagSpec(),
    "max-num-seqs": FlagSpec(),
    "max-num-batched-tokens": FlagSpec(),
    "enable-chunked-prefill": FlagSpec(takes_value=False),
    "kv-cache-dtype": FlagSpec(),
    "block-size": FlagSpec(),
    "dtype": FlagSpec(),
    "quantization": FlagSpec(),
    "enforce-eager": FlagSpec(takes_value=False),
    "enable-prefix-caching": FlagSpec(takes_value=False),
    "num-gpu-blocks-override": FlagSpec(),
    "disable-log-requests": FlagSpec(
        until=(0, 12, 0), takes_value=False,
        note="request logging is off by default since 0.10.2; --enable-log-requests turns "
             "it on"),
    "enable-log-requests": FlagSpec(since=(0, 10, 2), takes_value=False,
                                    note="older releases log requests by default"),
    # The V0 engine's preemption knobs: V1 always recomputes and has no CPU swap space.
    "preemption-mode": FlagSpec(
        until=V0_REMOVED,
        note="with the V0 engine; V1 always preempts by recompute: size max_num_seqs "
             "with the planner instead"),
    "swap-space": FlagSpec(
        until=V0_REMOVED,
        note="with the V0 engine, whose CPU swap it sized; V1 never swaps and the flag "
             "itself went in 0.18.0: size max_num_seqs with the planner instead"),
    "kv-cache-memory-bytes": FlagSpec(since=(0, 11, 0)),
    "max-num-partial-prefills": FlagSpec(since=(0, 7, 3)),
    # Multimodal checkpoints (a nested text_config) served as text-only language models.
    "language-model-only": FlagSpec(
        since=(0, 32, 0), takes_value=False,
        note="verified from 0.32.0; older releases: limit-mm-per-prompt with every modality 0"),
    "long-prefill-token-threshold": FlagSpec(since=(0, 7, 3)),
    # KV-cache manager flags (issue 21). Present in 0.11.0, the oldest wheel read for them;
    # the GDN state honours mamba-ssm-cache-dtype from 0.17.0 (kv_manager.py).
    "speculative-config": FlagSpec(since=(0, 11, 0)),
    "mamba-ssm-cache-dtype": FlagSpec(since=(0, 11, 0)),
    "disable-hybrid-kv-cache-manager": FlagSpec(since=(0, 11, 0), takes_value=False),
}

# kv-cache-dtype values and the first release that accepts each.
KV_DTYPE_SINCE: dict[str, Version] = {
    "auto": (0, 0, 0),
    "fp8_e5m2": (0, 0, 0),
    "fp8": (0, 4, 0),
    "fp8_e4m3": (0, 4, 0),
    "bfloat16": (0, 11, 0),
    "float16": (0, 11, 0),
}


@dataclass(frozen=True)
class EngineTraits:
    """How one release plans memory and schedules."""

    version: Version
    engine: str  # "V0" or "V1"
    entrypoint: tuple[str, ...]
    always_chunked: bool  # V1 schedules prefills in chunks whatever the flag says
    block_sizes: tuple[int, ...]
    # Sampler/logits scratch of the profiling run, bytes per (sequence x vocab entry).
    sampler_bytes: int
    # Memory outside PyTorch's allocator (CUDA context, NCCL buffers), per GPU.
    non_torch_bytes_tp1: int
    non_torch_bytes_tp: int
    # CUDA graphs are captured after the KV cache is allocated in every release in the table,
    # so they need headroom outside the utilization budget.
    cuda_graphs_in_budget: bool = False
    # The block size the engine takes when --block-size is not given (CacheConfig.
    # DEFAULT_BLOCK_SIZE: 16, 64 from 0.34.0).
    default_block_size: int = 16
    # Gated DeltaNet layers export prefill checkpoints with the FlashInfer prefill kernel
    # (0.33.0+): in "align" mode the block is a multiple of 64 and each request holds one
    # more state block (QwenGatedDeltaNetAttention.get_kv_cache_spec).
    gdn_prefill_checkpoints: bool = False
    # The extensible KV cache is the CUDA default (0.34.0+): the engine captures CUDA graphs
    # and warms up first, then sizes the pool from the memory actually free; given
    # --kv-cache-memory-bytes (or --num-gpu-blocks-override) it sizes the classic way.
    extensible_kv_default: bool = False

    @property
    def label(self) -> str:
        return ".".join(map(str, self.version))

    def supports(self, flag: str) -> bool:
        """False only for a flag this release is known to lack (flag_refusal); unknown flags
        pass where the release has no generated table."""
        return flag_refusal(flag, self.version) is None


MIB = 1 << 20


GDN_CHECKPOINTS_SINCE = (0, 33, 0)
# Before the oldest release read from its wheel (releases/): CacheConfig's block size 16,
# the pool sized by profiling.
SIZING_BEFORE_TABLES: dict[str, object] = {"default_block_size": 16,
                                           "extensible_kv_cache_default": False}


def _sizing(version: Version) -> dict[str, object]:
    """The sizing defaults the release's own CacheConfig has (releases/, read from its wheel
    by scripts/vllm-release.py): the newest release read at or before VERSION, which also
    stands for releases newer than the table."""
    read = [(v, label) for v, label in _table_versions() if v <= version]
    return dict(RELEASES[read[-1][1]]["sizing"]) if read else SIZING_BEFORE_TABLES


def traits(version: Version) -> EngineTraits:
    v1 = version >= V1_DEFAULT
    sizing = _sizing(version)
    return EngineTraits(
        version=version,
        engine="V1" if v1 else "V0",
        entrypoint=("vllm", "serve"),
        always_chunked=v1,
        block_sizes=(1, 8, 16, 32, 64, 128, 256) if v1 else (8, 16, 32),
        # Profiling sampler scratch: ~38.5 B per (seq x vocab entry) in 0.11-era logs, ~15.5
        # in 0.19 logs; V0 samples max_num_seqs rows in fp32 with fewer copies. Rounded up;
        # releases between 0.11 and 0.19 keep the larger figure (unmeasured here).
        sampler_bytes=18 if version >= (0, 19, 0) else 40 if v1 else 16,
        # Logged non-torch memory: 0.07-0.35 GiB at TP=1 (up to 1.79 GiB on a 0.6.5 build; V1:
        # 0.13-0.26, so 0.375 GiB keeps every row under-promised with a median error <= 0.5 GiB),
        # 0.54-2.17 GiB per GPU with NCCL at TP>1 (3.58 GiB on that 0.6.5 build).
        non_torch_bytes_tp1=(384 if v1 else 2048) * MIB,
        non_torch_bytes_tp=(2560 if v1 else 4096) * MIB,
        default_block_size=int(str(sizing["default_block_size"])),
        gdn_prefill_checkpoints=version >= GDN_CHECKPOINTS_SINCE,
        extensible_kv_default=bool(sizing["extensible_kv_cache_default"]),
    )


# Metric names that changed between releases (vLLM's policy: a metric deprecated in X.Y is
# hidden in X.Y+1 and removed in X.Y+2). vllm#18354 deprecated vllm:gpu_cache_usage_perc for
# vllm:kv_cache_usage_perc and vllm:gpu_prefix_cache_{queries,hits} for
# vllm:prefix_cache_{queries,hits} (the new names introduced in 0.10; the old ones hidden from
# 0.11, removed in 0.12: vllm#29330). vllm#24110 deprecated vllm:time_per_output_token_seconds
# for vllm:inter_token_latency_seconds in 0.11 (hidden in 0.12, then removed: vllm#32661). The
# V0 engine (the default before 0.8) has no prefix-cache counters, only its hit-rate gauge
# vllm:gpu_prefix_cache_hit_rate (deprecated in 0.8, hidden from 0.9: vllm#15458). The other
# names are stable from 0.5 on. The alert rules and the Grafana dashboards
# (plugin_utils/grafana_dashboards.py) read these names and no others.
KV_CACHE_USAGE_RENAMED = (0, 10, 0)
PREFIX_CACHE_RENAMED = (0, 10, 0)
INTER_TOKEN_LATENCY_RENAMED = (0, 11, 0)


def metric_names(version: Version) -> dict[str, str]:
    """Prometheus metric names a vLLM release exports, by role: counters by their exported
    name (..._total), histograms by their family name (the series add _bucket, _sum, _count).

    A role the release has no metric for is absent: prefix_cache_hits and
    prefix_cache_queries (counters) from the V1 engine on (0.8), prefix_cache_hit_rate (the V0
    gauge) before it."""
    names = {
        "kv_cache_usage": "vllm:kv_cache_usage_perc" if version >= KV_CACHE_USAGE_RENAMED
        else "vllm:gpu_cache_usage_perc",
        "preemptions": "vllm:num_preemptions_total",
        "requests_running": "vllm:num_requests_running",
        "requests_waiting": "vllm:num_requests_waiting",
        "ttft": "vllm:time_to_first_token_seconds",
        "e2e_latency": "vllm:e2e_request_latency_seconds",
        "inter_token_latency": "vllm:inter_token_latency_seconds"
        if version >= INTER_TOKEN_LATENCY_RENAMED else "vllm:time_per_output_token_seconds",
        "prompt_tokens": "vllm:prompt_tokens_total",
        "generation_tokens": "vllm:generation_tokens_total",
    }
    if version >= PREFIX_CACHE_RENAMED:
        names["prefix_cache_hits"] = "vllm:prefix_cache_hits_total"
        names["prefix_cache_queries"] = "vllm:prefix_cache_queries_total"
    elif version >= V1_DEFAULT:
        names["prefix_cache_hits"] = "vllm:gpu_prefix_cache_hits_total"
        names["prefix_cache_queries"] = "vllm:gpu_prefix_cache_queries_total"
    else:
        names["prefix_cache_hit_rate"] = "vllm:gpu_prefix_cache_hit_rate"
    return names


# ---------------------------------------------------------------- generated release tables
# Releases absorbed with scripts/vllm-release.py have a table read from their wheel
# (releases/vX_Y_Z.py): every option their `vllm serve` parser accepts, the ones vLLM marks
# deprecated, the pins the configured indexes lacked. For those releases the table decides;
# for the others the hand history above (FLAGS) does.


def _label(version: Version) -> str:
    return ".".join(map(str, version))


@functools.cache
def _table_versions() -> tuple[tuple[Version, str], ...]:
    return tuple(sorted((parse_version(label), label) for label in RELEASES))


def flag_refusal(flag: str, version: Version) -> str | None:
    """Why vLLM ``version`` cannot take --flag, or None where it can (or nothing is known).

    With a generated table for the release, a flag its parser lacks is refused, citing the
    first release with a table that lacked it after one that had it ("removed in 0.34.0"),
    and the deprecation that announced it; without a table, FLAGS judges (unknown flags pass).
    """
    name = flag.lstrip("-").replace("_", "-")
    label = _label(version)
    table = release(label)
    spec = FLAGS.get(name)
    hand = spec.refusal(name, version) if spec else None
    if table is None:
        newest = _table_versions()[-1] if RELEASES else None
        if hand and newest and version > newest[0] and name in RELEASES[newest[1]]["flags"]:
            return None  # the newest release read from its wheel takes it again
        return hand
    if name in table["flags"]:
        return None
    tables = _table_versions()
    had = [v for v, t in tables if v < version and name in RELEASES[t]["flags"]]
    if had:
        last = max(had)
        removed = min(v for v, t in tables if v > last and name not in RELEASES[t]["flags"])
        deprecated = [v for v, t in tables if v <= last
                      and name in RELEASES[t]["deprecated_flags"]]
        why = ""
        if deprecated:
            first = min(deprecated)
            message = RELEASES[_label(last)]["deprecated_flags"][name]["message"]
            why = f" (deprecated since {_label(first)}: {message})"
        return f"vLLM {label} has no --{name}: removed in {_label(removed)}{why}"
    if hand:
        return hand
    newer = [v for v, t in tables if v > version and name in RELEASES[t]["flags"]]
    if newer:
        return f"vLLM {label} has no --{name}: it arrived in {_label(min(newer))}"
    return f"vLLM {label} has no --{name}: its `vllm serve` parser lacks it"


def flag_deprecation(flag: str, version: Version) -> str | None:
    """A note where vLLM ``version`` marks --flag deprecated (it still takes it), else None."""
    name = flag.lstrip("-").replace("_", "-")
    table = release(_label(version))
    if table is None or name not in table["deprecated_flags"]:
        return None
    dep = table["deprecated_flags"][name]
    announced = dep["removal_announced"]
    overdue = (f" (its removal was announced for {announced}; {_label(version)} still takes it)"
               if announced and parse_version(announced) <= version else "")
    return f"--{name}, deprecated in vLLM {_label(version)}: {dep['message']}{overdue}"


def installable_releases() -> list[Version]:
    """The releases read from their wheels whose pins the public index resolved."""
    return [v for v, label in _table_versions() if not RELEASES[label]["unresolved_pins"]]


def unresolved_pins(version_label: str) -> list[str]:
    """The exact pins ("name==version") of a release the indexes read at absorption lacked.

    Empty where the release has no table. The installer cannot resolve such a release from
    those indexes; a site with its own wheelhouse carrying the pins can still choose it.
    """
    table = release(version_label)
    return list(table["unresolved_pins"]) if table else []
