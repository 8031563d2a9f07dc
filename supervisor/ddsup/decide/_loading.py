"""Loading weights without a stampede: ``[lane] max_loading`` across the allocation.

A lane is *loading* from the moment the run tells its node to start it (its stagger wait
included) until it is ready, or has failed or exited for good: a lane that was ready and
restarts is loading again. With ``max_loading = N``, the run's state starts a lane of
that unit only while fewer than N of the unit's lanes are loading, in plan order; the
nodes start what they are told, so the bound holds across every node. The ranks of a
multi-node replica load as one lane and start together. Units without the key start
their lanes as soon as they are due.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from ddsup.plan import Plan, PlannedInstance
from ddsup.record import InstanceRecord, InstanceState
from ddsup.units import UnitSet


class LoadingGate:
    """Which due lanes may start now, given the lanes of their unit already loading."""

    def __init__(self, units: UnitSet, plan: Plan) -> None:
        self._bound = {
            u.name: u.lane.max_loading for u in units.lanes if u.lane and u.lane.max_loading
        }
        self._lanes = {
            unit: [p.instance for p in plan.instances if p.unit == unit and not p.rank]
            for unit in self._bound
        }

    def admit(
        self,
        due: Sequence[PlannedInstance],
        started: Collection[str],
        records: Mapping[str, InstanceRecord],
    ) -> list[PlannedInstance]:
        """Of ``due`` (in plan order), the instances that may start now."""
        if not self._bound:
            return list(due)
        loading = {
            unit: sum(1 for name in lanes if name in started and _loading(records.get(name)))
            for unit, lanes in self._lanes.items()
        }
        admitted: set[str] = set()
        out = []
        for planned in due:
            bound = self._bound.get(planned.unit)
            if bound is None:
                out.append(planned)
            elif planned.rank:  # a rank > 0 starts with its replica's rank 0
                if planned.replica_name in admitted or planned.replica_name in started:
                    out.append(planned)
            elif loading[planned.unit] < bound:
                loading[planned.unit] += 1
                admitted.add(planned.instance)
                out.append(planned)
        return out

    def holds(
        self, unit: str, started: Collection[str], records: Mapping[str, InstanceRecord]
    ) -> str | None:
        """Why lanes of ``unit`` that are due do not start yet: those loading already fill
        its ``max_loading``; None when they do not (or the unit has no bound)."""
        bound = self._bound.get(unit)
        if bound is None:
            return None
        lanes = self._lanes[unit]
        loading = sum(1 for name in lanes if name in started and _loading(records.get(name)))
        if loading < bound:
            return None
        # not the count: it moves with every lane that starts or becomes ready, and the
        # rows of 8,000 held lanes are rebuilt when their reason changes
        return f"for max_loading = {bound} (lanes of {unit.rstrip('@')} loading fill it)"


def _loading(record: InstanceRecord | None) -> bool:
    """Told to start and not ready, failed or exited yet (no event yet counts too)."""
    state = InstanceState.INACTIVE if record is None else record.state
    return state is not InstanceState.READY and not state.final
