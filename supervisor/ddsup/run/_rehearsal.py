"""``ddsup start --rehearse``: the real unit files, with fake-vllm in place of vLLM.

A rehearsal runs a job exactly as written (plan, stagger, readiness, endpoint, worker,
restarts, stop), except that every lane that runs a vLLM server runs ``ddsup fake-vllm``
with the same arguments instead, so a job's real unit files can be tried on a laptop, in
CI or on CPU nodes before they meet a GPU. What changes, and nothing else:

- in ``exec`` and ``exec_follower`` of lane units, the words up to and including
  ``vllm serve`` (a wrapper such as ``apptainer exec … image.sif`` included, or ``python
  -m vllm.entrypoints.openai.api_server``) become ddsup's own interpreter running
  ``-m ddsup fake-vllm``; fake-vllm takes every ``vllm serve`` flag;
- ``--host X`` becomes ``--host {host}``: the lane listens only on the address ddsup
  reaches it at (127.0.0.1 for simulated nodes), never on every interface;
- preflight does not check ``model_path`` (fake-vllm reads no weights);
- without GPUs (none detected and no ``--gpus-per-node``), each node gets as many
  simulated GPUs as the largest lane asks for, and the local launcher simulates as many
  nodes as the widest lane spans, unless ``--nodes`` says otherwise.

Lane units that start something other than vLLM run unchanged. Node agents apply the
same :func:`rehearsal_units` to the unit files they load, told by their ``Setup``.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping, Sequence

from ddsup.plan._allocation import detect_gpus
from ddsup.plan._request import AllocationRequest, LauncherKind, launcher_kind
from ddsup.units import Unit, UnitSet, UnitType
from ddsup.units._vllm_argv import vllm_command_span

FAKE_VLLM = (sys.executable, "-m", "ddsup", "fake-vllm")


def rehearsal_units(units: UnitSet) -> UnitSet:
    """``units`` with each lane's vLLM server command replaced by fake-vllm."""
    return dataclasses.replace(units, units=tuple(_rehearse(u) for u in units.units))


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


def _rehearse(unit: Unit) -> Unit:
    if unit.type is not UnitType.LANE:
        return unit
    service = unit.service
    follower = service.exec_follower
    return dataclasses.replace(
        unit,
        service=dataclasses.replace(
            service,
            exec=_fake(service.exec),
            exec_follower=None if follower is None else _fake(follower),
        ),
    )


def _fake(argv: Sequence[str]) -> tuple[str, ...]:
    span = vllm_command_span(argv)
    if span is None:
        return tuple(argv)
    return (*FAKE_VLLM, *_local_host(argv[span[1] :]))


def _local_host(args: Sequence[str]) -> list[str]:
    """``--host X`` / ``--host=X`` → the address ddsup reaches the lane at."""
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            out.append("{host}")
        elif arg == "--host":
            skip = True
            out.append(arg)
        elif arg.startswith("--host="):
            out.append("--host={host}")
        else:
            out.append(arg)
    return out
