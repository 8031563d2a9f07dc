"""Everything ``ddsup start`` decides before the run begins: units, allocation, plan.

These are the checks ``ddsup verify`` and ``ddsup plan`` make, and nothing has been
started or written when one fails: a bad command line (64), invalid unit files (65) or
an allocation that cannot hold the plan (69) end ``ddsup start`` with its message
printed once and no state directory left behind (a failed attempt must not become "the
newest run" that ``status`` and ``logs`` show). What can only fail once processes run
(preflight on the nodes, a unit) is recorded in the run's state directory.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ddsup._errors import UsageError
from ddsup.channel._messages import EndpointSetup
from ddsup.plan._model import Plan
from ddsup.plan._resolve import Allocation, plan_for, resolve_allocation
from ddsup.run._lane_feed import endpoint_setup
from ddsup.run._options import RunOptions
from ddsup.run._rehearsal import rehearsal_request, rehearsal_units, rehearsed_lanes
from ddsup.units import UnitSet, load_unit_set, printable


@dataclass(frozen=True)
class PreparedRun:
    """A run that can begin: its units, where they go, and the endpoint's settings."""

    options: RunOptions
    units: UnitSet
    allocation: Allocation
    plan: Plan
    endpoint: EndpointSetup | None
    rehearsed: tuple[str, ...] = ()  # --rehearse: the lane units now running fake-vllm


def prepare_run(options: RunOptions, environ: Mapping[str, str] | None = None) -> PreparedRun:
    """Load, check and place the units; a DdsupError says what is wrong, nothing is written."""
    environ = os.environ if environ is None else environ
    units = _load_units(options.directory)
    request = options.allocation
    rehearsed: tuple[str, ...] = ()
    if options.rehearse:
        rehearsed = rehearsed_lanes(units)
        units = rehearsal_units(units)
        request = rehearsal_request(request, units, environ)
    allocation = resolve_allocation(request, environ)
    setup = endpoint_setup(units)
    return PreparedRun(options, units, allocation, plan_for(units, allocation), setup, rehearsed)


def _load_units(directory: Path) -> UnitSet:
    if not directory.is_dir():
        raise UsageError(f"{printable(str(directory))} is not a directory of unit files")
    return load_unit_set(directory.resolve())
