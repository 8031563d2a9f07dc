"""Everything ``ddsup start`` decides before the run begins: units, allocation, plan.

These are the checks ``ddsup verify`` and ``ddsup plan`` make, and nothing has been
started or written when one fails: a bad command line (64), invalid unit files (65) or
an allocation that cannot hold the plan (69; unless the plan waits for the GPUs each
node's agent reports, ``Allocation.gpus_from_agents``) end ``ddsup start`` with its message
printed once and no state directory left behind (a failed attempt must not become "the
newest run" that ``status`` and ``logs`` show). What can only fail once processes run
(preflight on the nodes, a unit) is recorded in the run's state directory.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ddsup._errors import PreflightError, UsageError
from ddsup.agent import version_problem
from ddsup.controller._options import RunOptions
from ddsup.controller._rehearsal import rehearsal_request, rehearsal_units, rehearsed_lanes
from ddsup.plan import Allocation, Plan, plan_for, resolve_allocation
from ddsup.units import EndpointSection, UnitSet, load_unit_set, printable


@dataclass(frozen=True)
class PreparedRun:
    """A run that can begin: its units, where they go, and the endpoint's settings."""

    options: RunOptions
    units: UnitSet
    allocation: Allocation
    plan: Plan | None  # None: the nodes' agents report their GPUs first (gpus_from_agents)
    endpoint: EndpointSection | None  # its section, once its keys are checked
    rehearsed: tuple[str, ...] = ()  # --rehearse: the lane units now running fake-vllm


def prepare_run(options: RunOptions, environ: Mapping[str, str] | None = None) -> PreparedRun:
    """Load, check and place the units; a DdsupError says what is wrong, nothing is written."""
    environ = os.environ if environ is None else environ
    units = _load_units(options.directory)
    problem = version_problem(environ)
    if problem is not None:  # the agents check their nodes; this is ddsup start's own
        where = environ.get("SLURMD_NODENAME") or socket.gethostname()
        raise PreflightError(f"preflight failed: {where} (ddsup start): {problem}")
    request = options.allocation
    rehearsed: tuple[str, ...] = ()
    if options.rehearse:
        rehearsed = rehearsed_lanes(units)
        units = rehearsal_units(units)
        request = rehearsal_request(request, units, environ)
    allocation = resolve_allocation(request, environ)
    setup = endpoint_section(units)
    agents_first = allocation.gpus_from_agents and bool(units.lanes)
    plan = None if agents_first else plan_for(units, allocation)
    return PreparedRun(options, units, allocation, plan, setup, rehearsed)


def endpoint_section(units: UnitSet) -> EndpointSection | None:
    """The endpoint's section, checked first: each ``api_key_env`` must name a set variable.

    The endpoint's own, and every lane's (the key the endpoint sends that lane, which
    the lane checks): a run that would answer 401 to every request fails at once.
    """
    for lane in units.lanes:
        name = lane.lane.api_key_env if lane.lane is not None else None
        if name and not os.environ.get(name):
            raise UsageError(f"{lane.source.path}: api_key_env names {name}, which is not set")
    endpoint = units.endpoint
    if endpoint is None or endpoint.endpoint is None:
        return None
    section = endpoint.endpoint
    if section.api_key_env and not os.environ.get(section.api_key_env):
        raise UsageError(
            f"{endpoint.source.path}: api_key_env names {section.api_key_env}, which is not set"
        )
    return section


def _load_units(directory: Path) -> UnitSet:
    if not directory.is_dir():
        raise UsageError(f"{printable(str(directory))} is not a directory of unit files")
    return load_unit_set(directory.resolve())
