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

import dataclasses
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ddsup._errors import PreflightError, UsageError
from ddsup.agent import version_problem
from ddsup.controller._options import RunOptions
from ddsup.decide import rehearsal_units
from ddsup.plan import (
    Allocation,
    AllocationRequest,
    LauncherKind,
    Plan,
    detect_gpus,
    launcher_kind,
    plan_for,
    resolve_allocation,
)
from ddsup.units import (
    EndpointSection,
    UnitSet,
    UnitType,
    load_unit_set,
    printable,
    vllm_command_span,
)


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


# --- ddsup start --rehearse: the real unit files, with fake-vllm in place of vLLM ---------
# A rehearsal runs a job exactly as written (plan, stagger, readiness, endpoint, worker,
# restarts, stop), except that every lane that runs a vLLM server runs ``ddsup fake-vllm``
# with the same arguments instead, so a job's real unit files can be tried on a laptop, in
# CI or on CPU nodes before they meet a GPU. What changes, and nothing else:
#
# - in ``exec`` and ``exec_follower`` of lane units, the words up to and including
#   ``vllm serve`` (a wrapper such as ``apptainer exec … image.sif`` included, or ``python
#   -m vllm.entrypoints.openai.api_server``) become ddsup's own interpreter running
#   ``-m ddsup fake-vllm``; fake-vllm takes every ``vllm serve`` flag;
# - ``--host X`` becomes ``--host {host}``: the lane listens only on the address ddsup
#   reaches it at (127.0.0.1 for simulated nodes), never on every interface;
# - preflight does not check ``model_path`` (fake-vllm reads no weights);
# - without GPUs (none detected and no ``--gpus-per-node``), each node gets as many
#   simulated GPUs as the largest lane asks for, and the local launcher simulates as many
#   nodes as the widest lane spans, unless ``--nodes`` says otherwise.
#
# Lane units that start something other than vLLM run unchanged. Node agents apply the
# same :func:`rehearsal_units` to the unit files they load, told by their ``Setup``
# (``decide._rehearsal_units``: an agent imports only that).


def rehearsed_lanes(units: UnitSet) -> tuple[str, ...]:
    """The lane units whose ``exec`` starts vLLM (those a rehearsal changes)."""
    return tuple(
        u.name
        for u in units.units
        if u.type is UnitType.LANE and vllm_command_span(u.service.exec) is not None
    )


def rehearsal_request(
    request: AllocationRequest, units: UnitSet, environ: Mapping[str, str]
) -> AllocationRequest:
    """``request`` with simulated GPUs (and local nodes) where nothing gives them."""
    lanes = [u.lane for u in units.units if u.lane is not None]
    if not lanes:
        return request
    gpus, nodes = request.gpus_per_node, request.nodes
    if gpus is None and not detect_gpus(environ):
        gpus = max(lane.gpus for lane in lanes)
    if nodes is None and launcher_kind(request, environ) is LauncherKind.LOCAL:
        nodes = max(lane.nodes for lane in lanes)
    return dataclasses.replace(request, gpus_per_node=gpus, nodes=nodes)
