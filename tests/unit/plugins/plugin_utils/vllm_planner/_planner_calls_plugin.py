"""pytest plugin: record every kv_plan call the unit tests make (for the planner's golden).

    cd tests/unit/plugins/plugin_utils/vllm_planner
    PYTHONPATH=. PLANNER_CALLS=/tmp/calls.pkl pytest -q -p _planner_calls_plugin test_planner*.py
    python planner_golden.py --select-inputs /tmp/calls.pkl

Not a test module (pytest collects test_*.py only); nothing loads it unless asked.
"""

from __future__ import annotations

import atexit
import copy
import os
import pickle
from pathlib import Path
from typing import Any

from ansible_collections.vllm_fleet.serving.plugins.plugin_utils import vllm_planner
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner import (
    plan as planner_plan,
)
from ansible_collections.vllm_fleet.serving.plugins.plugin_utils.vllm_planner import (
    replicas as planner_replicas,
)

CALLS: list[tuple[object, object]] = []
_kv_plan = planner_plan.kv_plan


def _recording(config: object, **opts: Any) -> dict[str, Any]:
    CALLS.append((copy.deepcopy(config), copy.deepcopy(opts)))
    return _kv_plan(config, **opts)


# Bound before the test modules import it (a -p plugin loads before collection).
planner_plan.kv_plan = vllm_planner.kv_plan = planner_replicas.kv_plan = _recording


@atexit.register
def _dump() -> None:
    Path(os.environ.get("PLANNER_CALLS", "/tmp/planner-calls.pkl")).write_bytes(
        pickle.dumps(CALLS))
