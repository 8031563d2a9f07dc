"""The loading gate on its own: ``[lane] max_loading`` lanes of a unit loading at once.

A lane loads from the moment the run tells its node to start it until it is ready, or
has failed or exited; the next lane (plan order) starts when one leaves that state, a
restart loads again, and a replica's ranks start together as one lane.
"""

from __future__ import annotations

from dataclasses import replace

from ddsup.channel._messages import PreflightReport
from ddsup.decide._run_inputs import (
    Decision,
    Host,
    Observed,
    PreflightOver,
    PreflightReported,
    StartOn,
)
from ddsup.decide._run_state import RunState
from ddsup.record._events import UnitTransition
from ddsup.record._states import InstanceState as S
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


def _waiting(run: RunState) -> dict[str, str | None]:
    return {row.instance: row.reason for row in run.status_rows() if row.state is S.WAITING}


def test_status_says_what_holds_an_instance_that_has_not_started() -> None:
    """Preflight first, then ``max_loading``, the endpoint's ``min_ready``, a dependency:
    each instance the run holds is ``waiting``, and its reason says for what."""
    units = u.unit_set(_bounded(u.lane("lane@", replicas=3), 1), u.endpoint(), u.worker())
    run = RunState(units, u.plan(units, count=2, gpus=2))
    assert set(_waiting(run).values()) == {"for preflight on every node"}
    for node in run.layout.agent_nodes():
        run.handle(PreflightReported(PreflightReport(node)))
    run.handle(PreflightOver(120.0))  # lane@0 starts; it has no event yet
    held = "for max_loading = 1 (lanes of lane loading fill it)"
    quorum = "for min_ready: lane 0 of 3 lanes ready"
    assert _waiting(run) == {
        "lane@1": held,
        "lane@2": held,
        "endpoint": quorum,
        "worker": "after endpoint (not ready yet)",
    }
    run.handle(_to("lane@0", S.READY))  # lane@1 starts
    assert _waiting(run)["endpoint"] == "for min_ready: lane 1 of 3 lanes ready"
    assert "lane@1" not in _waiting(run)
    assert next(r for r in run.status_rows() if r.instance == "lane@1").state is S.INACTIVE
