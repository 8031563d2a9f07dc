"""Preflight: checks on a node before any lane starts there.

Each node agent checks that it is the node the plan names, that the GPUs the plan gives
its lanes exist, that the planned ports are free, and that ``model_path`` is readable.
Lanes with ``port = "auto"`` get their ports here: the agent binds port 0 to let the
kernel pick free ones (on a shared node this avoids other jobs' ports), and holds them
(:class:`HeldPorts`) until the controller starts its lanes. Released at once, the kernel
handed the same ports to the next agent on the same host: 128 simulated nodes picking
1,024 ports always had a few clashes (lanes failing "address already in use"); held,
no agent can pick another's, since the controller starts lanes only once every agent
has reported. Problems are collected, not raised, so the controller can report every
node's problems at once.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence

from ddsup._errors import PreflightError
from ddsup.channel._messages import PreflightReport
from ddsup.plan._model import Plan, PlannedInstance
from ddsup.units._model import UnitSet, UnitType


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


class HeldPorts:
    """Ports picked for ``port = "auto"`` lanes, bound (not listening) until released."""

    def __init__(self, count: int) -> None:
        self._sockets: list[socket.socket] = []
        try:
            for _ in range(count):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                self._sockets.append(sock)
                sock.bind(("0.0.0.0", 0))
        except BaseException:
            self.release()
            raise
        self.ports = [int(s.getsockname()[1]) for s in self._sockets]

    def release(self) -> None:
        """Let the lanes bind them (idempotent)."""
        for sock in self._sockets:
            sock.close()
        self._sockets.clear()


def run_preflight(
    node: str,
    units: UnitSet,
    plan: Plan,
    *,
    gpus_available: int | None,
    slurm_node: str | None,
    check_model_path: bool = True,
) -> tuple[PreflightReport, HeldPorts]:
    """Check this node against the plan (never raises for a failed check); the ports
    picked are held until :meth:`HeldPorts.release`.

    ``check_model_path``: False for a rehearsal, whose fake-vllm lanes read no weights.
    """
    problems: list[str] = []
    if slurm_node is not None and slurm_node != node:
        problems.append(f"this agent runs on node {slurm_node!r}, the plan expected {node!r}")
    mine: Sequence[PlannedInstance] = plan.on_node(node)
    needed = max((g + 1 for i in mine for g in i.gpus), default=0)
    if gpus_available is not None and needed > gpus_available:
        problems.append(
            f"the plan needs GPU indices up to {needed - 1}, this node has {gpus_available} GPUs"
        )
    auto = [i for i in mine if i.type is UnitType.LANE and i.port is None and not i.rank]
    held = HeldPorts(len(auto))
    ports = {i.instance: port for i, port in zip(auto, held.ports, strict=True)}
    for planned in mine:
        for port in (planned.port, planned.master_port if not planned.rank else None):
            if port is not None and not _port_free(port):
                problems.append(f"port {port} planned for {planned.instance} is already in use")
        unit = units.by_name(planned.unit)
        path = unit.lane.model_path if unit.lane else None
        if check_model_path and path and not os.access(path, os.R_OK):
            problems.append(f"model_path {path!r} of {planned.instance} is not readable")
    return PreflightReport(node=node, problems=tuple(problems), ports=ports), held


def preflight_verdict(
    nodes: Sequence[str], reports: Mapping[str, PreflightReport], waited: float
) -> PreflightError | dict[str, int]:
    """The run's verdict on every node's report: the error that ends it (a node that did
    not report within ``waited`` seconds, a problem on any node), or the ports picked."""
    missing = ", ".join(sorted(set(nodes) - set(reports)))
    if missing:
        return PreflightError(f"no agent reported from node(s) {missing} within {waited:g}s")
    ordered = sorted(reports.items())
    problems = [f"{node}: {p}" for node, report in ordered for p in report.problems]
    if problems:
        return PreflightError("preflight failed: " + "; ".join(problems))
    return {k: v for _node, report in ordered for k, v in report.ports.items()}
