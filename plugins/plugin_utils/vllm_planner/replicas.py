"""Split a host's GPUs into engine replicas, one per tensor-parallel group."""

from __future__ import annotations

from typing import Any

from .errors import PlanError
from .options import positive_int
from .plan import kv_plan


def split_gpus(gpu_count: object, tensor_parallel_size: object = 1,
               base_port: object = 8000) -> list[dict[str, Any]]:
    """8 GPUs at TP=2 -> four replicas on ports base..base+3 with GPU sets 0,1 / 2,3 / ..."""
    count = positive_int(gpu_count, "gpu_count", "give the number of GPUs on the host")
    tp = positive_int(tensor_parallel_size, "tensor_parallel_size",
                      "use the number of GPUs one replica spans")
    port = positive_int(base_port, "base_port", "use a free TCP port such as 8000")
    if count % tp:
        raise PlanError("tensor_parallel_size",
                        f"{tp} does not divide the host's {count} GPUs; "
                        f"{count % tp} would sit idle",
                        "choose a tensor parallel size that divides the GPU count")
    if port + count // tp - 1 > 65535:
        raise PlanError("base_port", f"{port} leaves no room for {count // tp} replicas",
                        "use a lower base port")
    replicas = []
    for index in range(count // tp):
        gpus = list(range(index * tp, (index + 1) * tp))
        replicas.append({
            "index": index,
            "name": f"vllm-{index}",
            "port": port + index,
            "gpus": gpus,
            "cuda_visible_devices": ",".join(map(str, gpus)),
        })
    return replicas


def plan_replicas(config: object, gpu_count: object, base_port: object = 8000,
                  **options: Any) -> list[dict[str, Any]]:
    """One kv_plan per replica (its own port), each replica dict with a 'plan' key."""
    tp = options.get("tensor_parallel_size", 1)
    return [{**replica, "plan": kv_plan(config, port=replica["port"], **options)}
            for replica in split_gpus(gpu_count, tp, base_port)]
