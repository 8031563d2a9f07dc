"""What a run's units and plan say, worked out once per plan: the still half of the run.

:class:`~ddsup.decide._run_state.RunState` decides as events arrive; what it looks up for
each event (an instance's model, its host, what it waits for, which nodes need an agent,
each agent's part of the plan) does not change with events, only with the plan itself,
which changes once: preflight gives ``port = "auto"`` lanes their ports
(:meth:`RunLayout.with_ports`). Kept apart so that the moving half reads as rules, and so
that nothing per event walks the plan (at 1,024 lanes a walk per event was most of the
controller's CPU).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence, Set
from dataclasses import replace

from ddsup.decide._ordering import (
    agent_nodes,
    lanes_by_model,
    runs_on_agent,
    start_after,
    stop_levels,
    survives_node_loss,
)
from ddsup.decide._run_inputs import Decision, Host, StopOn
from ddsup.plan import Plan, PlannedInstance
from ddsup.units import EndpointSection, UnitSet


class RunLayout:
    """The plan of a run with what its rules look up, indexed once."""

    def __init__(self, units: UnitSet, plan: Plan) -> None:
        self.units = units
        self.plan = plan
        self.lane_models = lanes_by_model(units, plan)  # model → its serving lanes
        self.model_of = {i: m for m, names in self.lane_models.items() for i in names}
        endpoint = units.endpoint
        section = (endpoint.endpoint if endpoint else None) or EndpointSection()
        # the endpoint's quorum: ready lanes of each model it needs to start
        self.min_ready = {
            m: section.min_ready.required(len(n)) for m, n in self.lane_models.items()
        }
        self.by_name = {p.instance: p for p in plan.instances}
        # what each instance waits for: an event only re-checks these
        self.after = start_after(units, plan)
        self._agent_nodes = agent_nodes(units, plan)
        self._node_plans: dict[str, Plan] = {}
        self._agent_instances: dict[str, frozenset[str]] | None = None  # on first use

    def with_ports(self, ports: dict[str, int]) -> RunLayout:
        """The layout of the plan once preflight has picked ``port = "auto"`` ports."""
        return RunLayout(self.units, self.plan.with_ports(ports))

    def host_of(self, planned: PlannedInstance) -> Host:
        return Host(planned.node, runs_on_agent(self.units, planned))

    def by_host(self, instances: Iterable[PlannedInstance]) -> list[tuple[Host, tuple[str, ...]]]:
        """``instances`` grouped by the host that runs them, in plan order."""
        return by_host(self.host_of, instances)

    def forwarded_to(self, signum: int) -> list[PlannedInstance]:
        """The instances whose units forward ``signum`` (``forward_signals``)."""
        units = self.units
        return [
            p
            for p in self.plan.instances
            if signum in units.by_name(p.unit).service.forward_signals
        ]

    def agent_nodes(self) -> tuple[str, ...]:
        """Nodes that need an agent, in plan order."""
        return self._agent_nodes

    def node_plan(self, node: str) -> Plan:
        """What the agent of ``node`` needs of the plan: its node and its instances (which
        carry all their specifiers need, rank 0's address included). Sent to each agent
        instead of the whole plan, which at 1,000 nodes × 8 lanes is 2 MB per agent."""
        if not self._node_plans:
            slices: dict[str, list[PlannedInstance]] = {}
            for planned in self.plan.instances:
                slices.setdefault(planned.node, []).append(planned)
            self._node_plans = {
                n.name: replace(self.plan, nodes=(n,), instances=tuple(slices.get(n.name, ())))
                for n in self.plan.nodes
            }
        return self._node_plans[node]

    def agent_instances(self, node: str) -> frozenset[str] | None:
        """The instances the agent on ``node`` runs; None when no agent belongs there.

        Asked for every message an agent sends: worked out for every node at once, in
        one pass over the plan (one per node would be quadratic at allocation scale)."""
        if self._agent_instances is None:
            grouped: dict[str, set[str]] = {}
            for planned in self.plan.instances:
                if self.host_of(planned).agent:
                    grouped.setdefault(planned.node, set()).add(planned.instance)
            self._agent_instances = {n: frozenset(grouped[n]) for n in self._agent_nodes}
        return self._agent_instances.get(node)

    def survives_node_loss(self) -> bool:
        """Whether losing some agent node would not end the run (its units all continue)."""
        return survives_node_loss(self.units, self.plan)

    def stop_levels(self) -> list[list[PlannedInstance]]:
        """Instances by start depth, deepest first: the order in which to stop them."""
        return stop_levels(self.units, self.plan)

    def stop_limit(self, level: Sequence[PlannedInstance]) -> float:
        """The longest ``timeout_stop`` in a level."""
        return stop_limit(self.units, level)


# --- one level of the stop sequence: what to send where, and what to wait for -------------
# The run stops level by level (``_ordering.stop_levels``: deepest start first). For a
# level, agents get a stop for every instance of theirs in it (an agent that never started
# one ignores it); the controller's own node for those it started. The wait covers what
# can still report: started here, or heard of from an agent, and not final yet.


def by_host(
    host_of: Callable[[PlannedInstance], Host], instances: Iterable[PlannedInstance]
) -> list[tuple[Host, tuple[str, ...]]]:
    """``instances`` grouped by where they run, hosts and names in plan order."""
    groups: dict[Host, list[str]] = {}
    for planned in instances:
        groups.setdefault(host_of(planned), []).append(planned.instance)
    return [(host, tuple(names)) for host, names in groups.items()]


def stop_level(
    level: Sequence[PlannedInstance],
    host_of: Callable[[PlannedInstance], Host],
    started: Set[str],
    heard_of: Collection[str],
    final: Set[str],
) -> tuple[list[Decision], set[str]]:
    """The stops of one level, and the instances to wait for."""
    decisions: list[Decision] = []
    for host, names in by_host(host_of, level):
        mine = [n for n in names if host.agent or n in started]
        if mine:
            decisions.append(StopOn(host, tuple(mine)))
    awaited = {
        p.instance
        for p in level
        if (p.instance in started and not host_of(p).agent)
        or (p.instance in heard_of and host_of(p).agent)
    }
    return decisions, awaited - final


def stop_limit(units: UnitSet, level: Sequence[PlannedInstance]) -> float:
    """The longest ``timeout_stop`` in a level."""
    return max((units.by_name(p.unit).service.timeout_stop for p in level), default=0.0)
