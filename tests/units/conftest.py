"""Fixtures of the unit-file tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from units_helpers import WriteUnits


@pytest.fixture
def write_units(tmp_path: Path) -> WriteUnits:
    """Write ``{file name: contents}`` into a fresh directory and return it."""

    def write(files: dict[str, str | bytes]) -> Path:
        directory = tmp_path / "units"
        directory.mkdir(exist_ok=True)
        for name, content in files.items():
            data = content.encode() if isinstance(content, str) else content
            (directory / name).write_bytes(data)
        return directory

    return write
