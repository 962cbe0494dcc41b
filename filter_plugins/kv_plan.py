"""Ansible filters over the planner: a thin adapter, all logic lives in vllm_planner/.

    {{ config | kv_plan(gpu='H200', tensor_parallel_size=2, workload=...) }}
    {{ plan | kv_plan_table('host / replica 0') }}
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleFilterError

_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from vllm_planner import PlanError, kv_plan, plan_table  # noqa: E402


def _kv_plan(config: object, **options: Any) -> dict[str, Any]:
    try:
        return kv_plan(config, **options)
    except PlanError as exc:
        raise AnsibleFilterError(str(exc)) from None


def _kv_plan_table(plan: dict[str, Any], title: str = "") -> str:
    try:
        return plan_table(plan, title)
    except (KeyError, TypeError) as exc:
        raise AnsibleFilterError(f"kv_plan_table: input is not a kv_plan result ({exc})") from None


class FilterModule:
    """kv_plan and kv_plan_table."""

    def filters(self) -> dict[str, Any]:
        return {"kv_plan": _kv_plan, "kv_plan_table": _kv_plan_table}
