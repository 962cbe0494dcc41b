"""The vLLM releases read from their wheels: one generated table per release.

Each module (v0_34_0.py, ...) is written by ``scripts/vllm-release.py VERSION`` from the
release's own metadata and code (the ``vllm serve`` parser, CacheConfig, the metric and route
definitions); the routine adds its import below. Older releases have no table: the planner
keeps the hand-kept history of versions.py (FLAGS, metric_names, traits) for them.
"""

from __future__ import annotations

from typing import Any

# BEGIN RELEASES (scripts/vllm-release.py adds each release here)
from .v0_32_0 import RELEASE as _v0_32_0
from .v0_33_0 import RELEASE as _v0_33_0
from .v0_34_0 import RELEASE as _v0_34_0

_TABLES: tuple[dict[str, Any], ...] = (
    _v0_32_0,
    _v0_33_0,
    _v0_34_0,
)
# END RELEASES

RELEASES: dict[str, dict[str, Any]] = {table["version"]: table for table in _TABLES}


def release(version_label: str) -> dict[str, Any] | None:
    """The generated table of vLLM ``version_label`` (e.g. "0.34.0"), None where none exists."""
    return RELEASES.get(version_label.strip().removeprefix("v"))
