"""The controller's reads and reports around a run, kept apart from its supervision.

Three things ``ddsup start`` says or reads that decide nothing: the unit files it loads
(each problem printed on its own line before the run ends 78), the no-orphan layers it
holds (an event, so ``status`` and the record say them), and where the allocation's GPU
time went (a report at the end, never the run's end when it cannot be made).
"""

from __future__ import annotations

import sys
from pathlib import Path

from ddsup._errors import DdsupError, UnitFileError, UsageError
from ddsup.process import Containment
from ddsup.record._efficiency import efficiency_line
from ddsup.record._events import Contained
from ddsup.units import load_unit_set, printable
from ddsup.units._model import UnitSet


def load_units(directory: Path) -> UnitSet:
    """The run's units; a problem in them is printed whole (file, line, key) and raised."""
    if not directory.is_dir():
        raise UsageError(f"{printable(str(directory))} is not a directory of unit files")
    try:
        return load_unit_set(directory.resolve())
    except UnitFileError as err:
        for problem in err.problems:
            print(problem, file=sys.stderr)
        raise UnitFileError(err.problems) from None


def contained_event(containment: Containment) -> Contained:
    """The event saying which no-orphan layers ``ddsup start`` holds on its node."""
    layers = containment.layers
    assert layers is not None, "an open containment has its layers"
    return Contained(
        node=None,
        supervisor=layers.supervisor,
        summary=layers.summary(),
        details=layers.to_json(),
    )


def efficiency_report(state_dir: Path) -> str:
    """Where the allocation's GPU time went (docs/operating.md), from the run's files."""
    try:
        return efficiency_line(state_dir)
    except (DdsupError, OSError, ValueError) as err:  # a report, never the run's end
        return f"GPU time: not known ({err})"
