"""Shared fixtures: real model configs and the repository root on sys.path."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from _models import QWEN25_72B  # noqa: E402


@pytest.fixture
def qwen72b() -> dict[str, Any]:
    return dict(QWEN25_72B)
