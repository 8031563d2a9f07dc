"""Start and stop order of a run's instances, derived from units and plan alone.

Pure functions, so ordering rules are stated (and testable) in one place:

- an instance starts once every instance of each unit in its ``after`` is ready (a
  oneshot: completed); the endpoint additionally waits for ``min_ready`` lanes of each
  model, and the worker for the endpoint, without saying so;
- stop order is the reverse of start depth, and instances of one depth stop in parallel;
- lanes and each-node services run in node agents (:func:`agent_nodes`), and a run
  survives losing a node when all its agent runs says ``on_failure = "continue"``.
"""

from __future__ import annotations

from ddsup.plan import Plan, PlannedInstance
from ddsup.units import OnFailure, Placement, UnitSet, UnitType


def runs_on_agent(units: UnitSet, planned: PlannedInstance) -> bool:
    """Lanes and each-node services run in node agents; everything else in the controller."""
    if planned.type is UnitType.LANE:
        return True
    unit = units.by_name(planned.unit)
    return unit.type in (UnitType.SERVICE, UnitType.ONESHOT) and unit.on is Placement.EACH_NODE


def agent_instances(units: UnitSet, plan: Plan, node: str) -> list[PlannedInstance]:
    """What the agent of ``node`` runs (lanes and each-node services there)."""
    return [p for p in plan.on_node(node) if runs_on_agent(units, p)]


def survivable(units: UnitSet, plan: Plan, node: str) -> bool:
    """Whether the run may go on without ``node``: all it runs says ``continue``."""
    return all(_continues(units, p) for p in agent_instances(units, plan, node))


def _continues(units: UnitSet, planned: PlannedInstance) -> bool:
    """Whether the run goes on when ``planned`` fails (its unit says ``continue``)."""
    return units.by_name(planned.unit).service.on_failure is OnFailure.CONTINUE


def agent_nodes(units: UnitSet, plan: Plan) -> tuple[str, ...]:
    """The nodes that need an agent (they run lanes or each-node services), in plan order."""
    agents = {p.node for p in plan.instances if runs_on_agent(units, p)}
    return tuple(n.name for n in plan.nodes if n.name in agents)


def survives_node_loss(units: UnitSet, plan: Plan) -> bool:
    """Whether losing some agent node would not end the run (its units all continue):
    :func:`survivable` of some agent node, found in one pass over the plan (a pass per
    node would be quadratic at allocation scale, in ``ddsup start``'s head start)."""
    agents: set[str] = set()
    fatal: set[str] = set()  # nodes whose loss ends the run
    for planned in plan.instances:
        if runs_on_agent(units, planned):
            agents.add(planned.node)
            if not _continues(units, planned):
                fatal.add(planned.node)
    return bool(agents - fatal)


def start_after(units: UnitSet, plan: Plan) -> dict[str, tuple[str, ...]]:
    """For each instance, those that must be ready before it starts (lane quorum not
    included), in plan order. What an instance waits for depends on its unit alone, so
    the plan is walked once, not once per instance (quadratic at allocation scale, and
    twice in each start)."""
    of_unit: dict[str, list[str]] = {}
    for planned in plan.instances:
        of_unit.setdefault(planned.unit, []).append(planned.instance)
    position = {planned.instance: n for n, planned in enumerate(plan.instances)}
    waits: dict[str, tuple[str, ...]] = {}
    for name in of_unit:
        found = [i for after in _waits_for(units, name) for i in of_unit.get(after, ())]
        waits[name] = tuple(sorted(found, key=position.__getitem__))
    return {planned.instance: waits[planned.unit] for planned in plan.instances}


def _waits_for(units: UnitSet, name: str) -> set[str]:
    """The units whose instances one of unit ``name`` waits for: its ``after``, and the
    endpoint for the worker."""
    unit = units.by_name(name)
    names = {units.by_name(dep).name for dep in unit.after}
    if unit.type is UnitType.WORKER and units.endpoint is not None:
        names.add(units.endpoint.name)
    return names


def lanes_by_model(units: UnitSet, plan: Plan) -> dict[str, list[str]]:
    """Serving instances (rank 0 of each replica) of every model, in plan order."""
    by_model: dict[str, list[str]] = {}
    for planned in plan.instances:
        if planned.type is UnitType.LANE and not planned.rank:
            lane = units.by_name(planned.unit).lane
            assert lane is not None
            by_model.setdefault(lane.model, []).append(planned.instance)
    return by_model


def stop_levels(units: UnitSet, plan: Plan) -> list[list[PlannedInstance]]:
    """Instances grouped by start depth, deepest first: the order in which to stop them."""
    depth: dict[str, int] = {}

    def unit_depth(name: str, seen: frozenset[str] = frozenset()) -> int:
        if name in depth:
            return depth[name]
        unit = units.by_name(name)
        deps = [units.by_name(d).name for d in unit.after]
        if unit.type is UnitType.ENDPOINT:
            deps += [u.name for u in units.lanes]
        if unit.type is UnitType.WORKER and units.endpoint is not None:
            deps.append(units.endpoint.name)
        value = 1 + max((unit_depth(d, seen | {name}) for d in deps if d not in seen), default=-1)
        depth[name] = value
        return value

    levels: dict[int, list[PlannedInstance]] = {}
    for planned in plan.instances:
        levels.setdefault(unit_depth(planned.unit), []).append(planned)
    return [levels[k] for k in sorted(levels, reverse=True)]
