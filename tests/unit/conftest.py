"""Shared fixtures: real model configs and the repository root on sys.path."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
# The checkout as the collection vllm_fleet.serving: modules and filters import their
# module_utils and the planner as ansible_collections.vllm_fleet.serving.plugins.<...>.
if str(ROOT / ".collections") not in sys.path:
    sys.path.insert(0, str(ROOT / ".collections"))

from _models import QWEN25_72B  # noqa: E402


@pytest.fixture
def qwen72b() -> dict[str, Any]:
    return dict(QWEN25_72B)
