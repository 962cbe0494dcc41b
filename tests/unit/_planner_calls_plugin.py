"""pytest plugin: record every kv_plan call the unit tests make (for the planner's golden).

    PYTHONPATH=tests/unit PLANNER_CALLS=/tmp/calls.pkl \
        pytest -q -p _planner_calls_plugin tests/unit/test_planner*.py ...
    python tests/unit/planner_golden.py --select-inputs /tmp/calls.pkl

Not a test module (pytest collects test_*.py only); nothing loads it unless asked.
"""

from __future__ import annotations

import atexit
import copy
import os
import pickle
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import vllm_planner  # noqa: E402
import vllm_planner.plan  # noqa: E402
import vllm_planner.replicas  # noqa: E402

CALLS: list[tuple[object, object]] = []
_kv_plan = vllm_planner.plan.kv_plan


def _recording(config: object, **opts: Any) -> dict[str, Any]:
    CALLS.append((copy.deepcopy(config), copy.deepcopy(opts)))
    return _kv_plan(config, **opts)


# Bound before the test modules import it (a -p plugin loads before collection).
vllm_planner.plan.kv_plan = vllm_planner.kv_plan = vllm_planner.replicas.kv_plan = _recording


@atexit.register
def _dump() -> None:
    Path(os.environ.get("PLANNER_CALLS", "/tmp/planner-calls.pkl")).write_bytes(
        pickle.dumps(CALLS))
