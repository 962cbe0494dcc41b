"""Errors the planner raises: every one names the input field and the fix."""

from __future__ import annotations

from typing import Any


class PlanError(ValueError):
    """Bad or contradictory input. ``field`` is the option (dotted for nested keys)."""

    def __init__(self, field: str, problem: str, fix: str) -> None:
        self.field = field
        self.problem = problem
        self.fix = fix
        super().__init__(f"kv_plan: {field}: {problem}. Fix: {fix}")


class HazardError(PlanError):
    """The plan is well-formed but unsafe; carries the full plan for reporting."""

    def __init__(self, messages: list[str], plan: dict[str, Any]) -> None:
        self.plan = plan
        ids = ", ".join(str(h["id"]) for h in plan["hazards"] if not h["overridden"])
        super().__init__(
            "hazards",
            "the plan is refused: " + " | ".join(messages),
            f"change the flags as each message says, or override with "
            f"hazard_overrides: {{<id>: '<written reason>'}} for: {ids}",
        )
