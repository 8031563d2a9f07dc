"""One level of the stop sequence: what to send where, and what to wait for.

The run stops level by level (``_ordering.stop_levels``: deepest start first). For a
level, agents get a stop for every instance of theirs in it (an agent that never started
one ignores it); the controller's own node for those it started. The wait covers what
can still report: started here, or heard of from an agent, and not final yet.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence, Set

from ddsup.decide._run_inputs import Decision, Host, StopOn
from ddsup.plan import PlannedInstance
from ddsup.units import UnitSet


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
