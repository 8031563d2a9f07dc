"""The controller's reads and reports around a run, kept apart from its supervision.

Two things ``ddsup start`` reads or says that decide nothing: the unit files it loads
(each problem printed on its own line before the run ends 78), and the no-orphan layers
it holds (an event, so ``status`` and the record say them).
"""

from __future__ import annotations

import sys
from pathlib import Path

from ddsup._errors import UnitFileError, UsageError
from ddsup.process import Containment
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
