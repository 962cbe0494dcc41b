"""GPU catalog: memory as CUDA reports it to the engine, and fp8 KV cache support.

``memory_bytes`` is the total the engine sees (``torch.cuda.mem_get_info``), which is a
few hundred MiB below the marketing size and below nvidia-smi's total; the values are
rounded down from what vLLM start-up logs report, so the planner never over-counts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from .errors import PlanError

GIB = 1 << 30


@dataclass(frozen=True)
class Gpu:
    name: str
    memory_bytes: int
    fp8: bool
    # CUDA compute capability x 10 (H100/H200: 90). vLLM picks kernels by it, and some
    # kernels shape the KV cache (the FlashInfer GDN prefill kernel on SM90, vLLM 0.33+).
    sm: int = 90


def _gib(value: float) -> int:
    return int(value * GIB)


# nvidia-smi totals: H100 80GB 81559 MiB (engines see 79.18-79.22 GiB), H100 NVL 95830 MiB,
# H200 / H200 NVL 143771 MiB. About 0.46 GiB less than nvidia-smi is visible to CUDA.
CATALOG: dict[str, Gpu] = {
    gpu.name: gpu
    for gpu in (
        Gpu("H100-SXM", _gib(79.18), True),
        Gpu("H100-PCIe", _gib(79.18), True),
        Gpu("H100-NVL", _gib(93.10), True),
        Gpu("H200", _gib(139.80), True),
        Gpu("H200-NVL", _gib(139.80), True),
        Gpu("A100-80GB", _gib(79.15), False, 80),
        Gpu("A100-40GB", _gib(39.38), False, 80),
        Gpu("L40S", _gib(44.39), True, 89),
    )
}

ALIASES = {
    "h100": "H100-SXM",
    "h10080gbhbm3": "H100-SXM",
    "h100sxm5": "H100-SXM",
    "h100sxm580gb": "H100-SXM",
    "h100pcie80gb": "H100-PCIe",
    "h10080gbpcie": "H100-PCIe",
    "h100nvl94gb": "H100-NVL",
    "h200sxm": "H200",
    "h200141gb": "H200",
    "h200sxm141gb": "H200",
    "a100sxm480gb": "A100-80GB",
    "a10080gbpcie": "A100-80GB",
}


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower().replace("nvidia", ""))


_INDEX = {_key(name): name for name in CATALOG} | ALIASES


def _capability(value: Mapping[object, object]) -> int:
    raw = value.get("compute_capability", "9.0")
    match = re.fullmatch(r"(\d{1,2})\.(\d)", str(raw).strip()) if not isinstance(raw, bool) \
        else None
    if match is None:
        raise PlanError("gpu.compute_capability", f"must be major.minor such as 9.0, got {raw!r}",
                        "give the CUDA compute capability nvidia-smi reports "
                        "(nvidia-smi --query-gpu=compute_cap --format=csv)")
    return int(match.group(1)) * 10 + int(match.group(2))


def resolve_gpu(value: object) -> Gpu:
    """A catalog name (case and punctuation ignored) or a mapping
    {name, memory_bytes[, fp8][, compute_capability]} (compute capability such as 9.0; the
    default 9.0 is Hopper, the H100/H200 this project targets)."""
    if isinstance(value, str):
        found = _INDEX.get(_key(value))
        if found is None:
            raise PlanError(
                "gpu",
                f"unknown GPU {value!r}",
                "use a catalog name (" + ", ".join(CATALOG) + ") or a mapping "
                "{name: ..., memory_bytes: <bytes CUDA reports>, fp8: true|false}",
            )
        return CATALOG[found]
    if isinstance(value, Mapping):
        name = value.get("name")
        memory = value.get("memory_bytes")
        if memory is None and isinstance(name, str) and _key(name) in _INDEX:
            return CATALOG[_INDEX[_key(name)]]
        if isinstance(memory, bool) or not isinstance(memory, int) or memory <= 0:
            raise PlanError(
                "gpu.memory_bytes",
                f"must be a positive whole number of bytes for GPU {name!r}, got {memory!r}",
                "give the memory CUDA reports for the GPU (nvidia-smi total minus ~0.5 GiB)",
            )
        fp8 = value.get("fp8", False)
        if not isinstance(fp8, bool):
            raise PlanError("gpu.fp8", f"must be true or false, got {fp8!r}",
                            "say whether the GPU stores fp8 KV cache natively")
        return Gpu(str(name or "custom"), memory, fp8, _capability(value))
    raise PlanError("gpu", "is missing or not a name or mapping",
                    "set gpu to a catalog name such as H200, or {name, memory_bytes}")
