"""The planner's public outputs stay what the golden file says (planner_golden.py, beside it).

Each case: a model config and an option set (inventories, plain sets, the unit tests' own
calls) -> the plan, its table, its replicas, or the error text. A change to any of them
fails here; regenerate the golden only deliberately:
    python tests/unit/plugins/plugin_utils/vllm_planner/planner_golden.py --write-golden
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from planner_golden import EXPECTED, canonical, representative, run, run_replicas

CASES = representative()
GOLDEN: dict[str, Any] = json.loads(EXPECTED.read_text())  # keeps key order


def test_the_golden_covers_every_case_and_nothing_else() -> None:
    names = set(CASES) | {f"{n} [replicas]" for n, (_cfg, _opts, gpus) in CASES.items() if gpus}
    assert names == set(GOLDEN)


def test_the_golden_holds_plans_refusals_and_errors() -> None:
    kinds = {v.get("error", "plan") for v in GOLDEN.values()}
    assert {"plan", "PlanError", "HazardError"} <= kinds


@pytest.mark.parametrize("name", sorted(CASES))
def test_output_matches_the_golden(name: str) -> None:
    config, opts, gpus = CASES[name]
    assert canonical(run(config, opts)) == canonical(GOLDEN[name])
    if gpus:
        got = canonical(run_replicas(config, gpus, opts))
        assert got == canonical(GOLDEN[f"{name} [replicas]"])
