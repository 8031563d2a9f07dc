from __future__ import annotations

import uuid
from pathlib import Path

import pytest


@pytest.fixture
def invocation_id() -> str:
    """A fresh run id per test, so a test's sweep can never touch another test's processes."""
    return f"test-{uuid.uuid4()}"


@pytest.fixture
def log_path(tmp_path: Path) -> Path:
    return tmp_path / "unit.log"
