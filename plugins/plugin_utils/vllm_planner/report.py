"""A plan as a readable table, for plan.yml and the README."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

GIB = 1 << 30


def _gib(value: object) -> str:
    return f"{value / GIB:.2f}" if isinstance(value, int) else "-"


def _stack_rows(stack: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """vllm -> torch -> CUDA -> minimum driver, and the driver the host gets."""
    if not stack:
        return []
    if not stack.get("cuda"):
        needs = (f"{stack['package']} {stack['vllm']}: no CUDA runtime (CPU build)"
                 if stack["package"] != "vllm" else
                 f"vllm {stack['vllm']}: CUDA unknown (not in the stack table)")
    else:
        needs = (f"vllm {stack['vllm']} -> torch {stack['torch']} -> CUDA {stack['cuda']} "
                 f"-> driver R{stack['min_driver_branch']}+")
    rows = [("engine stack", needs)]
    driver = stack.get("driver")
    if driver:
        compat = ", cuda-compat" if driver.get("cuda_compat") else ""
        rows.append(("driver", f"{driver['version']} ({driver['source']}{compat})"))
    return rows


def _stage_rows(pipe: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """One row per pipeline stage (one host each), then the engine's blocks."""
    if not pipe:
        return []
    rows = [("pipeline", f"{pipe['pipeline_parallel_size']} stages (hosts), layers "
                         f"{'/'.join(map(str, pipe['layer_partition']))}")]
    for stage in pipe["stages"]:
        first, last = stage["layers"]
        kinds = " + ".join(f"{n} {kind}" for kind, n in stage["layer_kinds"].items())
        held = [name for name, on in (("embedding", stage["embedding"]),
                                      ("lm head", stage["lm_head"])) if on]
        if stage["mtp_layers"]:
            held.append(f"{stage['mtp_layers']} mtp")
        rows.append((f"stage {stage['rank']}",
                     f"layers {first}-{last} ({kinds}{', ' if held else ''}{', '.join(held)}); "
                     f"weights {_gib(stage['weights_bytes_per_gpu'])} GiB/gpu, kv pool "
                     f"{_gib(stage['kv_pool_bytes_per_gpu'])} GiB/gpu, "
                     f"{stage['num_gpu_blocks']:,} blocks"))
    rows.append(("engine kv blocks", f"{pipe['num_gpu_blocks']:,} (the smallest stage's: "
                                     f"stage {pipe['binding_stage']})"))
    return rows


def plan_table(plan: Mapping[str, Any], title: str = "") -> str:
    """Render one replica's plan as aligned text lines."""
    gpu = plan["gpu"]
    rows: list[tuple[str, str]] = [
        ("model", str(plan["model"])),
        ("gpu", f"{gpu['name']} ({_gib(gpu['memory_bytes'])} GiB usable)"),
        ("vllm", f"{plan['vllm_version']} ({plan['engine']} engine)"),
        ("tensor parallel", str(plan["tensor_parallel_size"]) + (
            f" x pipeline {plan['pipeline_parallel_size']}" if plan.get("pipeline") else "")),
        *_stack_rows(plan.get("engine_stack")),
        ("kv bytes/token/gpu", f"{plan['kv_bytes_per_token']:,} ({plan['kv_cache_dtype']})"),
        ("weights GiB/gpu", f"{_gib(plan['weights_bytes_per_gpu'])} "
                            f"(from {plan['weights_source']})"),
        ("reserve GiB/gpu", f"{_gib(plan['reserved_bytes_per_gpu'])} "
                            f"(activations {_gib(plan['activation_bytes_per_gpu'])}, "
                            f"non-torch {_gib(plan['non_torch_bytes_per_gpu'])})"),
        ("kv pool GiB/gpu", _gib(plan["kv_pool_bytes_per_gpu"])),
        ("kv blocks", f"{plan['num_gpu_blocks']:,} x {plan['block_size']} tokens"),
        ("kv pool tokens", f"{plan['kv_pool_tokens']:,}"),
        ("max concurrency", f"{plan['max_concurrency']:,} sequences of "
                            f"{plan['concurrency_seq_len']:,} tokens"),
    ]
    manager = plan.get("kv_cache_manager")
    if manager:  # hybrid geometries only: full-attention tables stay as they were
        mode = manager["mamba_cache_mode"]
        rows[4:4] = [("layers", str(plan["layer_mix"]))]
        rows += [
            ("kv cache groups", f"{' + '.join(manager['groups'])}, {manager['group_size']} "
                                f"layers each"
                                + (f", state {mode} mode, {manager['state_blocks_per_request']}"
                                   " blocks/request" if mode != "-" else "")),
            ("concurrency at max len", f"{plan['max_concurrency_at_max_model_len']:.2f} "
                                       f"(vLLM's 'Maximum concurrency for "
                                       f"{plan['max_model_len']:,} tokens per request')"),
        ]
    rows += _stage_rows(plan.get("pipeline"))
    decided = set(plan.get("decided", ()))
    for name, value in plan["flags"].items():
        mark = " (planned)" if name in decided else ""
        rows.append((f"--{name.replace('_', '-')}", f"{value}{mark}"))
    hazards = plan.get("hazards") or []
    if not hazards:
        rows.append(("hazards", "none"))
    for hazard in hazards:
        state = f"OVERRIDDEN: {hazard.get('reason')}" if hazard["overridden"] else "REFUSED"
        rows.append(("hazard", f"[{state}] {hazard['message']}"))
    for note in plan.get("notes") or []:
        rows.append(("note", str(note)))
    width = max(len(key) for key, _text in rows)
    lines = [title] if title else []
    lines += [f"  {key.ljust(width)}  {value}" for key, value in rows]
    return "\n".join(lines)
