"""The human view of a plan: a table of instances, then a GPU map per node.

Plain text, no colour, no terminal width probing: the output depends on the plan only,
so it can be diffed between runs and pasted into a ticket.

Example::

    client node0, endpoint http://127.0.0.1:9000, ports unique across nodes

    INSTANCE  TYPE      NODE   GPUS  PORT  REPLICA  RANK  DELAY
    llama@0   lane      node0  0-1   8000  0        0     0s
    ...

    node0  [0 1]=llama@0 [2 3]=llama@1 [4-7] free

Positions are what placement counts; a node whose GPUs were detected shows, at the end
of its line, which GPU each position is: ``(CUDA_VISIBLE_DEVICES 4,5,6,7)``.
"""

from __future__ import annotations

from collections.abc import Sequence

from ddsup.plan._plan import Node, Plan, PlannedInstance
from ddsup.units import printable

_HEADER = ("INSTANCE", "TYPE", "NODE", "GPUS", "PORT", "REPLICA", "RANK", "DELAY")


def render_plan(plan: Plan) -> str:
    """The whole human view, ending with a newline."""
    parts = [_summary(plan), "", *_table(plan.instances), "", *_gpu_map(plan)]
    return "\n".join(parts) + "\n"


def _summary(plan: Plan) -> str:
    endpoint = plan.endpoint_url or "none"
    scope = "across nodes (shared address)" if plan.shared_address else "per node"
    lanes = sum(1 for i in plan.instances if i.rank == 0)
    return (
        f"client {printable(plan.client)}, endpoint {endpoint}, {lanes} lane(s) on "
        f"{len(plan.nodes)} node(s), ports unique {scope}"
    )


def _table(instances: Sequence[PlannedInstance]) -> list[str]:
    rows = [_HEADER, *(_row(i) for i in instances)]
    widths = [max(len(row[c]) for row in rows) for c in range(len(_HEADER))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def _row(inst: PlannedInstance) -> tuple[str, ...]:
    lane = inst.rank is not None
    port = str(inst.port) if inst.port is not None else ("auto" if lane else "-")
    return (
        printable(inst.instance),
        inst.type.value,
        printable(inst.node),
        format_gpus(inst.gpus) or "-",
        port,
        "-" if inst.replica is None else str(inst.replica),
        "-" if inst.rank is None else f"{inst.rank}/{inst.nnodes}",
        format_seconds(inst.start_delay) if lane else "-",
    )


def format_gpus(gpus: Sequence[int]) -> str:
    """``0 1``, ``4-7``, ``0 1 4-7``: runs of three or more consecutive indices collapse."""
    runs: list[list[int]] = []
    for gpu in gpus:
        if runs and gpu == runs[-1][-1] + 1:
            runs[-1].append(gpu)
        else:
            runs.append([gpu])
    parts: list[str] = []
    for run in runs:
        if len(run) >= 3:
            parts.append(f"{run[0]}-{run[-1]}")
        else:
            parts.extend(str(g) for g in run)
    return " ".join(parts)


def format_seconds(seconds: float) -> str:
    """``0s``, ``12.5s``: short and exact enough for a table."""
    return f"{seconds:.3f}".rstrip("0").rstrip(".") + "s"


def _gpu_map(plan: Plan) -> list[str]:
    owners: dict[tuple[str, int], str] = {}
    for inst in plan.instances:
        for gpu in inst.gpus:
            owners[(inst.node, gpu)] = inst.instance
    names = {n.name: printable(n.name) for n in plan.nodes}
    width = max((len(shown) for shown in names.values()), default=0)
    return [
        f"{names[n.name].ljust(width)}  {_node_map(n, owners)}{_devices(n)}".rstrip()
        for n in plan.nodes
    ]


def _devices(node: Node) -> str:
    """Which GPU each position is, when the job was given particular ones (not simulated)."""
    if not node.devices:
        return ""
    return f"  (CUDA_VISIBLE_DEVICES {printable(','.join(node.devices))})"


def _node_map(node: Node, owners: dict[tuple[str, int], str]) -> str:
    if not node.gpus:
        return "(no GPUs)"
    groups: list[tuple[str | None, list[int]]] = []
    for gpu in node.gpus:
        owner = owners.get((node.name, gpu))
        if groups and groups[-1][0] == owner and gpu == groups[-1][1][-1] + 1:
            groups[-1][1].append(gpu)
        else:
            groups.append((owner, [gpu]))
    return " ".join(f"[{format_gpus(g)}]{'=' + printable(o) if o else ' free'}" for o, g in groups)
