"""Preflight: checks on a node before any lane starts there.

Each node agent checks, against the plan:

- **the node**: the address the plan gives it (where lanes are reached and other ranks
  connect) belongs to this machine. The controller has already checked the other half:
  the agent said hello as a node of the plan (``SLURMD_NODENAME`` under Slurm), once;
- **the GPUs**: the plan's entries for this node are the ones the agent finds here
  (``ddsup.plan._gpus``), and, where ``nvidia-smi`` exists, no other process holds memory
  on a lane's GPUs (``[lane] busy_gpus``: a problem, or a warning; simulated GPUs are not
  checked);
- **the ports** planned here are free; lanes with ``port = "auto"`` get theirs here (the
  agent binds port 0 to let the kernel pick: on a shared node this avoids other jobs'
  ports), held (:class:`~ddsup.agent._ports.HeldPorts`) until the controller starts its
  lanes, so that no other agent on the same host is given the same ones;
- **``model_path``** is readable;
- **the job** (``_node_checks``, for jobs ``ddsup submit`` made): this node runs the
  ddsup and Python that submitted it, and its state directory has the room the job
  asked for.

Problems are collected, not raised, so the controller can report every node's at once.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence

from ddsup.agent._node_checks import space_problem, version_problem
from ddsup.agent._ports import HeldPorts, port_free
from ddsup.channel import PreflightReport
from ddsup.plan import GpuList, Node, Plan, PlannedInstance, gpu_holders
from ddsup.units import BusyGpus, UnitSet, UnitType, printable


def address_problem(node: Node) -> str | None:
    """Why ``node.address`` is not this machine's (None: it is).

    An address is this machine's when a socket can be bound to it: the kernel allows that
    only for addresses of its own interfaces (loopback included).
    """
    try:
        infos = socket.getaddrinfo(node.address, None, type=socket.SOCK_STREAM)
    except OSError as err:
        return f"the plan's address of {node.name}, {node.address!r}, does not resolve: {err}"
    for family, kind, proto, _name, sockaddr in infos:
        with socket.socket(family, kind, proto) as sock:
            try:
                sock.bind((sockaddr[0], 0))
            except OSError:
                continue
            return None
    return (
        f"this agent runs on {socket.gethostname()!r}, but the plan reaches {node.name} at "
        f"{node.address!r}, which is not an address of this machine"
    )


def run_preflight(
    node: str,
    units: UnitSet,
    plan: Plan,
    *,
    gpus: GpuList,
    check_model_path: bool = True,
    state_dir: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[PreflightReport, HeldPorts]:
    """Check this node against the plan (never raises for a failed check); the ports
    picked are held until :meth:`HeldPorts.release`.

    ``check_model_path``: False for a rehearsal, whose fake-vllm lanes read no weights.
    ``state_dir`` and ``environ``: the job's checks (``_node_checks``).
    """
    planned_node = plan.node(node)
    problems: list[str] = []
    warnings: list[str] = []
    where = address_problem(planned_node)
    if where is not None:
        problems.append(where)
    problems += job_problems(state_dir, os.environ if environ is None else environ)
    mine: Sequence[PlannedInstance] = plan.on_node(node)
    problems += _gpu_problems(planned_node, mine, gpus)
    _busy_gpus(units, planned_node, mine, problems, warnings)
    auto = [i for i in mine if i.type is UnitType.LANE and i.port is None and not i.rank]
    held = HeldPorts(len(auto))
    ports = {i.instance: port for i, port in zip(auto, held.ports, strict=True)}
    for planned in mine:
        for port in (planned.port, planned.master_port if not planned.rank else None):
            if port is not None and not port_free(port):
                problems.append(f"port {port} planned for {planned.instance} is already in use")
        unit = units.by_name(planned.unit)
        path = unit.lane.model_path if unit.lane else None
        if check_model_path and path and not os.access(path, os.R_OK):
            problems.append(
                f"model_path {path!r} of {planned.instance} is not readable here: check "
                "the path and its permissions on this node (in a container, mount it)"
            )
    report = PreflightReport(
        node=node, problems=tuple(problems), ports=ports, warnings=tuple(warnings)
    )
    return report, held


def job_problems(state_dir: str | None, environ: Mapping[str, str]) -> list[str]:
    """What is wrong with the job on this node: another ddsup or Python than the
    submitter's, too little room for logs (``_node_checks``)."""
    found = [version_problem(environ)]
    if state_dir is not None:
        found.append(space_problem(state_dir, environ))
    return [problem for problem in found if problem is not None]


def _gpu_problems(node: Node, mine: Sequence[PlannedInstance], gpus: GpuList) -> list[str]:
    """The plan's GPUs for this node are ones the agent has here."""
    planned = tuple(node.device(i) for i in range(len(node.gpus)))
    needed = max((g + 1 for i in mine for g in i.gpus), default=0)
    if needed == 0 or gpus.devices[: len(planned)] == planned:
        return []
    wanted = ",".join(node.device(g) for i in mine for g in i.gpus)
    return [f"the plan gives lanes here GPUs {printable(wanted)}, this node has {gpus.describe()}"]


def _busy_gpus(
    units: UnitSet,
    node: Node,
    mine: Sequence[PlannedInstance],
    problems: list[str],
    warnings: list[str],
) -> None:
    """GPUs of lanes here that other processes hold memory on (nvidia-smi's word).

    Simulated GPUs (``--gpus-per-node``, no device entries) are not checked: their
    indices need not be GPUs of this machine at all.
    """
    lanes = [i for i in mine if i.type is UnitType.LANE and i.gpus and node.devices]
    owner = {node.device(g): lane for lane in lanes for g in lane.gpus}
    if not owner:
        return
    held = gpu_holders(tuple(owner))
    for holder in held or ():
        lane = owner[holder.entry]
        section = units.by_name(lane.unit).lane
        text = (
            f"GPU {printable(holder.entry)} of {lane.instance} is in use by another process: "
            f"{holder.describe()}"
        )
        if section is not None and section.busy_gpus is BusyGpus.WARN:
            warnings.append(text + ' (busy_gpus = "warn")')
        else:
            problems.append(text + ' (set busy_gpus = "warn" in [lane] to start anyway)')
