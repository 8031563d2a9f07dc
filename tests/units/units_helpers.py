"""Shared helpers of the unit-file tests (imported by name: pytest puts this folder on sys.path)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from ddsup._errors import Problem, UnitFileError
from ddsup.units import load_unit_set

WriteUnits = Callable[[dict[str, str | bytes]], Path]


def lines(*parts: str) -> str:
    """A file made of ``parts``, one a line (so tests can count lines at a glance)."""
    return "\n".join(parts) + "\n"


def problems_of(directory: Path) -> list[Problem]:
    """The problems ``load_unit_set`` raises for ``directory`` (fails if it loads)."""
    with pytest.raises(UnitFileError) as info:
        load_unit_set(directory)
    assert info.value.problems, "UnitFileError without problems"
    return info.value.problems
