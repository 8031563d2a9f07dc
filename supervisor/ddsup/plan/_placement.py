"""Placement: units + allocation → a deterministic :class:`Plan`.

The rules, which ``plan.json`` readers and users rely on:

- **Order.** Lane units with an integer ``replicas`` are placed in unit-name order; the
  one unit (at most) with ``replicas = "auto"`` is placed after all of them, even when
  its name sorts first, because it takes whatever the others leave. Replicas of a unit
  are numbered 0, 1, … in placement order.
- **Nodes and GPUs.** Each replica goes to the first node (in the order given) that has
  ``gpus`` free GPUs next to each other in ``Node.gpus`` order, at the lowest such
  position. A lane with ``nodes = k > 1`` takes ``k`` consecutive nodes and the same GPU
  indices on each; it becomes ``k`` instances, rank 0 ``NAME@r`` (it serves HTTP) and
  ranks ``i > 0`` ``NAME@r:i``. An integer ``replicas`` places exactly that many or
  raises :class:`PlacementError`; ``auto`` takes every remaining slot (none fitting is
  an error too).
- **Ports.** A port *domain* is a node, or the whole allocation when ``shared_address``
  (all nodes share one IP). Every lane process (every rank) with ``port = N`` gets the
  lowest port ``>= N`` not yet used in its domain, so one unit's lanes on a node get
  ``N, N+1, …`` and, with a shared address, counting continues across nodes. The
  endpoint's port is reserved on the client node first, so no lane takes it.
  ``port = "auto"`` stays ``None``: the agent picks free ports at preflight.
- **Master ports** (``nodes > 1``): the lowest port ``>= base + 1000 + replica`` that is
  free in the domains of all the replica's nodes, then reserved there; ``base`` is the
  lane's ``port``, or 29500 (PyTorch's default ``MASTER_PORT``) for ``port = "auto"``.
- **Stagger.** On each node, the first lane process starts at 0 s; each further one
  starts its own unit's ``stagger`` after the previous one, and the second one also
  waits its unit's ``lead_standoff``. For a single lane unit that is exactly
  ``lead_standoff + i * stagger`` for the i-th lane (i > 0). A multi-node replica starts
  all its ranks at once, at the latest delay any of its nodes asks for, and counts as a
  lane on each of them.
- **Other units.** Endpoint, worker, and services/oneshots with ``on = "client"`` run
  once on the client node, named after the unit (a template ``NAME@`` → ``NAME@0``).
  Services/oneshots with ``on = "each-node"`` run once per node that hosts lanes (ranks
  > 0 included), as ``NAME@<node>``; with no lanes at all they have no instance.
- **Instance order** in the plan: services/oneshots (unit-name order, each-node ones per
  node), lanes (placement order), the endpoint, the worker.

The placement is greedy first-fit, linear in lanes x GPUs per node, and touches no
clock, environment or randomness: the same inputs give a byte-identical ``to_json()``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from ddsup._errors import PlacementError, UsageError
from ddsup.plan._plan import Node, Plan, PlannedInstance
from ddsup.plan._shortage import shortage
from ddsup.units import LaneSection, Placement, Unit, UnitSet, UnitType, printable, served_names

MAX_PORT = 65535
MASTER_PORT_OFFSET = 1000
AUTO_MASTER_PORT_BASE = 29500
_SHARED_DOMAIN = ""  # the one port domain when every node shares one address


def make_plan(
    units: UnitSet,
    nodes: Sequence[Node],
    *,
    client: str,
    shared_address: bool = False,
    endpoint_host: str | None = None,
) -> Plan:
    """Place every unit instance of ``units`` on ``nodes``; see the module docstring."""
    all_nodes = tuple(nodes)
    client_node = _check_nodes(all_nodes, client)
    alloc = _Allocation(all_nodes, shared_address)
    endpoint_port = _endpoint_port(units.endpoint)
    if endpoint_port is not None:
        alloc.ports.reserve(client, endpoint_port)
    lanes = _place_lanes(units, alloc)
    lane_nodes = {inst.node for inst in lanes}
    services = _service_instances(units, all_nodes, lane_nodes, client)
    host = endpoint_host or client_node.address
    return Plan(
        nodes=all_nodes,
        client=client,
        instances=(*services, *lanes, *_client_instances(units, client)),
        endpoint_url=None if endpoint_port is None else _url(host, endpoint_port),
        shared_address=shared_address,
    )


def _check_nodes(nodes: tuple[Node, ...], client: str) -> Node:
    names = [n.name for n in nodes]
    dupes = sorted(name for name, count in Counter(names).items() if count > 1)
    if dupes:
        raise UsageError(f"node names must be unique; repeated: {printable(', '.join(dupes))}")
    for node in nodes:
        if node.name == client:
            return node
    shown = ", ".join(names[:4]) + (", …" if len(names) > 4 else "")
    raise UsageError(f"the client node {client!r} is not in the allocation ({shown or 'empty'})")


def _endpoint_port(endpoint: Unit | None) -> int | None:
    if endpoint is None:
        return None
    return endpoint.endpoint.port if endpoint.endpoint is not None else 9000


def _url(host: str, port: int) -> str:
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # an IPv6 literal
    return f"http://{host}:{port}"


# --------------------------------------------------------------------------- state


class _Ports:
    """Ports handed out so far, per domain; finds the lowest free port at or above a base."""

    def __init__(self, nodes: tuple[Node, ...], shared: bool) -> None:
        self._domain = {n.name: (_SHARED_DOMAIN if shared else n.name) for n in nodes}
        self._used: dict[str, set[int]] = {d: set() for d in self._domain.values()}
        self._hint: dict[tuple[str, int], int] = {}  # (domain, base) → lowest maybe-free

    def reserve(self, node: str, port: int) -> None:
        self._used[self._domain[node]].add(port)

    def take(self, node: str, base: int, what: str) -> int:
        """The lowest port ``>= base`` free on ``node``'s domain, now taken."""
        domain = self._domain[node]
        used = self._used[domain]
        port = max(base, self._hint.get((domain, base), base))
        while port in used:
            port += 1
        if port > MAX_PORT:
            raise PlacementError(
                f"no free port from {base} up to {MAX_PORT} on node {node!r} for {what}: "
                'lower the [lane] port, or use port = "auto"'
            )
        used.add(port)
        self._hint[(domain, base)] = port + 1
        return port

    def take_common(self, nodes: Sequence[str], base: int, what: str) -> int:
        """The lowest port ``>= base`` free in every domain of ``nodes``, taken in all."""
        domains = sorted({self._domain[n] for n in nodes})
        port = base
        while any(port in self._used[d] for d in domains):
            port += 1
        if port > MAX_PORT:
            raise PlacementError(
                f"no free master port from {base} up to {MAX_PORT} for {what}: "
                "lower the [lane] port"
            )
        for domain in domains:
            self._used[domain].add(port)
        return port


class _NodeState:
    """One node while placing: which GPU positions are taken, and its stagger clock."""

    __slots__ = ("lanes", "last_delay", "node", "used")

    def __init__(self, node: Node) -> None:
        self.node = node
        self.used = bytearray(len(node.gpus))  # 0 = free, 1 = taken, by position
        self.lanes = 0
        self.last_delay = 0.0

    def free(self) -> int:
        return self.used.count(0)

    def next_delay(self, lane: LaneSection) -> float:
        if self.lanes == 0:
            return 0.0
        standoff = lane.lead_standoff if self.lanes == 1 else 0.0
        return self.last_delay + lane.stagger + standoff


@dataclass(frozen=True)
class _Slot:
    """Where one replica goes: from node index ``first``, one GPU position per node."""

    first: int
    positions: tuple[int, ...]  # where the replica's GPUs start on each node of the window


class _Allocation:
    """The mutable working state of one placement (never escapes :func:`make_plan`)."""

    def __init__(self, nodes: tuple[Node, ...], shared: bool) -> None:
        self.nodes = [_NodeState(n) for n in nodes]
        self.ports = _Ports(nodes, shared)

    def find_slot(self, gpus: int, count: int, start: int) -> _Slot | None:
        """The first slot at or after node index ``start``; None when nothing fits."""
        want = bytes(gpus)
        for first in range(start, len(self.nodes) - count + 1):
            positions = self._fit(self.window(first, count), want)
            if positions is not None:
                return _Slot(first, positions)
        return None

    @staticmethod
    def _fit(window: list[_NodeState], want: bytes) -> tuple[int, ...] | None:
        """Lowest free run on the window's first node whose GPU indices are free on all."""
        lead, *rest = window
        position = lead.used.find(want)
        while position >= 0:
            indices = lead.node.gpus[position : position + len(want)]
            others = [_position_of(s, indices, want) for s in rest]
            if all(p is not None for p in others):
                return (position, *(p for p in others if p is not None))
            position = lead.used.find(want, position + 1)
        return None

    def window(self, first: int, count: int) -> list[_NodeState]:
        return self.nodes[first : first + count]


def _position_of(state: _NodeState, indices: tuple[int, ...], want: bytes) -> int | None:
    """Where ``indices`` sit, contiguous and free, on this node (usually the same position)."""
    gpus = state.node.gpus
    try:
        position = gpus.index(indices[0])
    except ValueError:
        return None
    end = position + len(indices)
    if gpus[position:end] == indices and state.used[position:end] == want:
        return position
    return None


# --------------------------------------------------------------------------- lanes


def _lane(unit: Unit) -> LaneSection:
    if unit.lane is None:
        raise PlacementError(f"lane unit {unit.name!r} has no [lane] section")
    lane = unit.lane
    if lane.gpus < 1 or lane.nodes < 1:
        raise PlacementError(
            f"lane unit {unit.name!r} needs gpus >= 1 and nodes >= 1 "
            f"(has gpus = {lane.gpus}, nodes = {lane.nodes})"
        )
    return lane


def lane_order(units: UnitSet) -> list[Unit]:
    """Lane units in placement order: fixed replicas by name, then the one ``auto`` unit."""
    lanes = sorted(units.lanes, key=lambda u: u.name)
    auto = [u for u in lanes if _lane(u).replicas is None]
    fixed = [u for u in lanes if _lane(u).replicas is not None]
    if len(auto) > 1:
        names = ", ".join(repr(u.name) for u in auto)
        raise PlacementError(
            f'at most one lane unit may say replicas = "auto"; these do: {names}. '
            "Give all but one an integer number of replicas"
        )
    return fixed + auto


def _place_lanes(units: UnitSet, alloc: _Allocation) -> list[PlannedInstance]:
    placed: list[PlannedInstance] = []
    done: list[str] = []
    for unit in lane_order(units):
        placed.extend(_place_unit(unit, alloc, done))
        done.append(unit.name)
    return placed


def _place_unit(unit: Unit, alloc: _Allocation, before: list[str]) -> list[PlannedInstance]:
    lane = _lane(unit)
    free_before = sum(s.free() for s in alloc.nodes)
    out: list[PlannedInstance] = []
    replica = start = 0
    while lane.replicas is None or replica < lane.replicas:
        slot = alloc.find_slot(lane.gpus, lane.nodes, start)
        if slot is None:
            break
        start = slot.first  # nodes before it never regain room for this unit
        out.extend(_take(unit, lane, replica, slot, alloc))
        replica += 1
    short = replica == 0 if lane.replicas is None else replica < lane.replicas
    if short:
        gpus = [(s.node.name, len(s.node.gpus)) for s in alloc.nodes]
        raise PlacementError(shortage(unit, lane, replica, gpus, free_before, before))
    return out


def _take(
    unit: Unit, lane: LaneSection, replica: int, slot: _Slot, alloc: _Allocation
) -> list[PlannedInstance]:
    count = len(slot.positions)
    window = alloc.window(slot.first, count)
    gpus = [slice(p, p + lane.gpus) for p in slot.positions]
    delay = _claim(window, gpus, lane)
    base = unit.base_name
    names = [f"{base}@{replica}"] + [f"{base}@{replica}:{r}" for r in range(1, count)]
    ports = [
        None if lane.port is None else alloc.ports.take(s.node.name, lane.port, names[r])
        for r, s in enumerate(window)
    ]
    master_addr = master_port = None
    if count > 1:
        master_addr = window[0].node.address
        base_port = AUTO_MASTER_PORT_BASE if lane.port is None else lane.port
        master_port = alloc.ports.take_common(
            [s.node.name for s in window],
            base_port + MASTER_PORT_OFFSET + replica,
            f"{names[0]} (master port)",
        )
    served = served_names(unit)
    return [
        PlannedInstance(
            instance=names[rank],
            unit=unit.name,
            type=UnitType.LANE,
            node=state.node.name,
            gpus=state.node.gpus[gpus[rank]],
            port=ports[rank],
            replica=replica,
            rank=rank,
            nnodes=count,
            master_addr=master_addr,
            master_port=master_port,
            start_delay=delay,
            model=lane.model,
            served_names=served,
        )
        for rank, state in enumerate(window)
    ]


def _claim(window: list[_NodeState], gpus: list[slice], lane: LaneSection) -> float:
    """Mark the GPUs taken on every node of the window; the replica's start delay."""
    delay = max(s.next_delay(lane) for s in window)
    taken = b"\x01" * lane.gpus
    for state, where in zip(window, gpus, strict=True):
        state.used[where] = taken
        state.lanes += 1
        state.last_delay = delay
    return delay


# --------------------------------------------------------------------------- others


def _instance_name(unit: Unit) -> str:
    return f"{unit.base_name}@0" if unit.template else unit.base_name


def _service_instances(
    units: UnitSet, nodes: tuple[Node, ...], lane_nodes: set[str], client: str
) -> list[PlannedInstance]:
    out: list[PlannedInstance] = []
    kinds = (UnitType.SERVICE, UnitType.ONESHOT)
    for unit in sorted((u for u in units.units if u.type in kinds), key=lambda u: u.name):
        if unit.on is Placement.EACH_NODE:
            out.extend(
                PlannedInstance(f"{unit.base_name}@{n.name}", unit.name, unit.type, n.name)
                for n in nodes
                if n.name in lane_nodes
            )
        else:
            out.append(PlannedInstance(_instance_name(unit), unit.name, unit.type, client))
    return out


def _client_instances(units: UnitSet, client: str) -> list[PlannedInstance]:
    out: list[PlannedInstance] = []
    if units.endpoint is not None:
        unit = units.endpoint
        port = _endpoint_port(unit)
        out.append(PlannedInstance(_instance_name(unit), unit.name, unit.type, client, port=port))
    if units.worker is not None:
        unit = units.worker
        out.append(PlannedInstance(_instance_name(unit), unit.name, unit.type, client))
    return out
