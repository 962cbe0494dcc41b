"""Ansible filters over the planner: a thin adapter, all logic lives in vllm_planner/.

    {{ config | kv_plan(gpu='H200', tensor_parallel_size=2, workload=...) }}
    {{ config | kv_plan_replicas(8, 8000, tensor_parallel_size=2, gpu='H100-SXM') }}
    {{ 8 | vllm_replicas(2, 8000) }}
    {{ hostvars[host] | engine_replicas }}     -> the host's replicas (its plan), one way for all
    {{ plan | kv_plan_table('host / replica 0') }}
    {{ '0.32.0' | vllm_metrics }}
    {{ ['0.9.2', '0.32.0'] | vllm_metric_selectors }}   -> PromQL selector by metric role
    {{ '550.163.01' | vllm_stack_problem(engine, source='debian', gpu='H200') }}  -> '' or why
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.role_data import role_default
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner import (
    PlanError,
    kv_plan,
    metric_names,
    parse_version,
    plan_replicas,
    plan_table,
    split_gpus,
)
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner.stack import (
    stack_problem,
)


def vllm_metrics(version: object) -> dict[str, str]:
    """Metric names the given vLLM release exports (for alert rules and checks)."""
    return metric_names(parse_version(version))


# Histogram roles: their _bucket series get a selector of their own.
HISTOGRAM_ROLES = ("ttft", "e2e_latency")


def vllm_metric_selectors(versions: object) -> dict[str, str]:
    """PromQL selectors, by metric role, of what every given vLLM release exports: the metric
    name where the releases agree, else {__name__=~"a|b"} (a fleet mid-upgrade: each replica
    exports one of the names, so the rules cover both). Histograms also as <role>_bucket."""
    listed = [versions] if isinstance(versions, str) else list(versions or [])  # type: ignore[call-overload]
    if not listed:
        raise PlanError("vllm_install_version", "no vLLM release to write the rules for",
                        "put the engine hosts in prometheus_server_engine_group")
    tables = [metric_names(parse_version(v)) for v in listed]
    names: dict[str, list[str]] = {}
    for table in tables:
        for role, name in table.items():
            names.setdefault(role, [])
            if name not in names[role]:
                names[role].append(name)
        for role in HISTOGRAM_ROLES:
            bucket = table[role] + "_bucket"
            names.setdefault(role + "_bucket", [])
            if bucket not in names[role + "_bucket"]:
                names[role + "_bucket"].append(bucket)
    return {role: found[0] if len(found) == 1 else '{__name__=~"' + "|".join(sorted(found)) + '"}'
            for role, found in names.items()}


def engine_replicas(host_vars: Mapping[str, Any],
                    planned_only: bool = False) -> list[dict[str, Any]]:
    """The replicas of one engine host, read the same way by every consumer that reads
    another host's (or its own) replica list: ``hostvars[host] | engine_replicas``.

    The plan is the one source: the host's vllm_plan_replicas (the plan play's fact, each
    replica with its plan). Where no plan ran in this run (a Prometheus-only play, a render
    in tests), the same split the planner makes (vllm_planner.split_gpus) of the host's
    vllm_plan_gpu_count, vllm_plan_options.tensor_parallel_size and vllm_plan_base_port
    (vllm_plan's defaults where unset): names and ports, no plan. ``planned_only``: [] then,
    for consumers that need each replica's plan (benchmark). A headless rank of an engine
    group is left out: it serves no API, metrics or health of its own."""
    planned = host_vars["vllm_plan_replicas"] if "vllm_plan_replicas" in host_vars else None
    if planned is not None:
        # A headless rank of a multi-host engine group serves no API (its rank 0 does).
        return [dict(replica) for replica in planned
                if not (replica.get("group") or {}).get("headless", False)]
    if planned_only:
        return []

    def value(name: str) -> Any:
        if name in host_vars:
            return host_vars[name]
        # vllm_plan's own literal default, read as the role_default filter reads it.
        return role_default(name)

    options = value("vllm_plan_options") or {}
    return split_gpus(value("vllm_plan_gpu_count"), options.get("tensor_parallel_size", 1),
                      value("vllm_plan_base_port"))


def vllm_stack_problem(driver_version: object, engine: object, source: str = "nvidia_repo",
                       gpu: str | None = None, cuda_compat: bool = False) -> str:
    """'' when the driver (version) can run the engine the plan described (vllm_plan's fact
    vllm_plan_engine_stack: package, vllm, cuda, override), else why not and the fixes. An
    override with a written reason, or no engine (a host without one), is never refused."""
    if not isinstance(engine, dict) or not engine.get("vllm") or engine.get("override"):
        return ""
    return stack_problem(vllm_version=str(engine["vllm"]),
                         engine_package=str(engine.get("package") or "vllm"),
                         driver_version=str(driver_version), driver_source=source,
                         gpu=gpu, cuda_compat=bool(cuda_compat))


def _named_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Turn the planner's field-naming errors into Ansible errors, without a traceback."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except PlanError as exc:
            raise AnsibleFilterError(str(exc)) from None
        except (KeyError, TypeError) as exc:
            if func is plan_table:
                raise AnsibleFilterError(
                    f"kv_plan_table: input is not a kv_plan result ({exc})") from None
            raise

    return wrapper


class FilterModule:
    """kv_plan, kv_plan_replicas, vllm_replicas, engine_replicas, kv_plan_table, vllm_metrics,
    vllm_metric_selectors and vllm_stack_problem."""

    def filters(self) -> dict[str, Any]:
        return {
            "kv_plan": _named_errors(kv_plan),
            "kv_plan_replicas": _named_errors(plan_replicas),
            "vllm_replicas": _named_errors(split_gpus),
            "engine_replicas": _named_errors(engine_replicas),
            "kv_plan_table": _named_errors(plan_table),
            "vllm_metrics": _named_errors(vllm_metrics),
            "vllm_metric_selectors": _named_errors(vllm_metric_selectors),
            "vllm_stack_problem": _named_errors(vllm_stack_problem),
        }
