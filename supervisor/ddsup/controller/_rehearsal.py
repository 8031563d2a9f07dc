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
same :func:`rehearsal_units` to the unit files they load, told by their ``Setup``
(``_rehearsal_units``, re-exported here: an agent imports only that).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from ddsup.decide import rehearsal_units as rehearsal_units
from ddsup.plan import AllocationRequest, LauncherKind, detect_gpus, launcher_kind
from ddsup.units import UnitSet, UnitType, vllm_command_span


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
