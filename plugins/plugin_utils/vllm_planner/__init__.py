"""KV-cache-safe vLLM planning, in plain Python (no Ansible import).

``kv_plan(config, **options)`` turns a Hugging Face config.json, a GPU, tensor parallelism
and a workload into vLLM flags that fit the KV pool, and refuses unsafe plans;
``pipeline_parallel_size`` sizes one engine across hosts stage by stage (pipeline.py), and
``plan_group(config, hosts, gpus_per_host, master_port, **options)`` gives each host's argv.
Inside: options.parse_options validates the options into a frozen PlanOptions, and
plan.build_plan sizes a typed, frozen Plan whose as_dict() is kv_plan's result.
"""

from .errors import HazardError, PlanError
from .group import plan_group
from .plan import HAZARDS, OPTIONS, kv_plan
from .replicas import plan_replicas, split_gpus
from .report import plan_table
from .versions import PINNED_VERSION, metric_names, parse_version

__all__ = [
    "HAZARDS", "OPTIONS", "PINNED_VERSION", "HazardError", "PlanError", "kv_plan",
    "metric_names", "parse_version", "plan_group", "plan_replicas", "plan_table",
    "split_gpus",
]
