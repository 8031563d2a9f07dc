"""The loading gate on its own: ``[lane] max_loading`` lanes of a unit loading at once.

A lane loads from the moment the run tells its node to start it until it is ready, or
has failed or exited; the next lane (plan order) starts when one leaves that state, a
restart loads again, and a replica's ranks start together as one lane.
"""

from __future__ import annotations

from dataclasses import replace

from ddsup.channel._messages import PreflightReport
from ddsup.record._events import UnitTransition
from ddsup.record._states import InstanceState as S
from ddsup.run._run_inputs import (
    Decision,
    Host,
    Observed,
    PreflightOver,
    PreflightReported,
    StartOn,
)
from ddsup.run._run_state import RunState
from ddsup.units._model import Unit
from support import units as u


def _bounded(unit: Unit, bound: int) -> Unit:
    assert unit.lane is not None
    return replace(unit, lane=replace(unit.lane, max_loading=bound))


def _started(decisions: list[Decision]) -> list[str]:
    return [name for d in decisions if isinstance(d, StartOn) for name in d.instances]


def _to(instance: str, state: S) -> Observed:
    return Observed(
        UnitTransition(
            instance=instance, node="n1", from_state=S.STARTING, to_state=state, reason="r"
        )
    )


def _run(*units: Unit, count: int = 2, gpus: int = 2) -> tuple[RunState, list[Decision]]:
    unit_set = u.unit_set(*units)
    run = RunState(unit_set, u.plan(unit_set, count=count, gpus=gpus))
    for node in run.layout.agent_nodes():
        run.handle(PreflightReported(PreflightReport(node)))
    return run, run.handle(PreflightOver(120.0))


def test_one_at_a_time_across_nodes_in_plan_order() -> None:
    run, first = _run(_bounded(u.lane("lane@", replicas=4), 1))
    assert _started(first) == ["lane@0"]
    assert _started(run.handle(_to("lane@0", S.STARTING))) == []
    assert _started(run.handle(_to("lane@0", S.READY))) == ["lane@1"]
    assert _started(run.handle(_to("lane@1", S.EXITED))) == ["lane@2"]  # an end frees it
    assert _started(run.handle(_to("lane@2", S.READY))) == ["lane@3"]  # lane@3 is on n2
    assert [d.host for d in run.handle(_to("lane@3", S.READY)) if isinstance(d, StartOn)] == []


def test_a_restart_loads_again_and_holds_its_slot() -> None:
    run, first = _run(_bounded(u.lane("lane@", replicas=4), 2))
    assert _started(first) == ["lane@0", "lane@1"]
    assert _started(run.handle(_to("lane@0", S.READY))) == ["lane@2"]
    run.handle(_to("lane@0", S.RESTARTING))  # loading again: lane@0, lane@1, lane@2
    assert _started(run.handle(_to("lane@1", S.READY))) == []  # still two loading
    assert _started(run.handle(_to("lane@2", S.READY))) == ["lane@3"]


def test_units_without_the_key_are_not_held_back() -> None:
    _run_state, first = _run(_bounded(u.lane("a@", replicas=2), 1), u.lane("b@", replicas=2))
    assert _started(first) == ["a@0", "b@0", "b@1"]


def test_a_replica_loads_as_one_lane_and_starts_whole() -> None:
    run, first = _run(_bounded(u.lane("lane@", nodes=2, replicas=2), 1), count=4, gpus=1)
    assert first == [
        StartOn(Host("n1", agent=True), ("lane@0",)),
        StartOn(Host("n2", agent=True), ("lane@0:1",)),
    ]
    assert _started(run.handle(_to("lane@0:1", S.READY))) == []  # rank 0 is what loads
    assert _started(run.handle(_to("lane@0", S.READY))) == ["lane@1", "lane@1:1"]
