"""Shared fixtures: real model configs. The collection imports through scripts/editable.sh."""

from __future__ import annotations

from typing import Any

import pytest
from _models import QWEN25_72B


@pytest.fixture
def qwen72b() -> dict[str, Any]:
    return dict(QWEN25_72B)
