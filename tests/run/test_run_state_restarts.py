"""``ddsup restart`` in the run's decisions: drain first, one at a time when rolling.

A lane in the endpoint's rotation leaves it (the set is published without it) and the
run waits for the endpoint to say it is drained before it restarts the lane; it rejoins
the rotation once ready again, and a rolling restart begins the next lane only then.
"""

from __future__ import annotations

import pytest

from ddsup.channel._messages import PreflightReport, RestartStep
from ddsup.decide._restarts import RestartRefused
from ddsup.decide._run_inputs import (
    AwaitDrain,
    Decision,
    Drained,
    Host,
    Observed,
    PreflightOver,
    PreflightReported,
    PublishLanes,
    RestartOn,
    RestartRequested,
    StopBegins,
)
from ddsup.decide._run_state import RunState
from ddsup.record._events import UnitTransition
from ddsup.record._states import InstanceState as S
from ddsup.units._model import MinReady, OnFailure
from support import units as u

LANES = Host("n1", agent=True)


def _to(instance: str, to: S) -> Observed:
    return Observed(
        UnitTransition(instance=instance, node="n1", from_state=S.STARTING, to_state=to, reason="")
    )


def _serving() -> RunState:
    """Three lanes of model m on n1 ready, the endpoint and the worker running; the run
    goes on with one lane failed for good (``min_ready`` 2)."""
    units = u.unit_set(
        u.lane("m@", replicas=3, service={"timeout_stop": 7.0, "on_failure": OnFailure.CONTINUE}),
        u.service("helper"),
        u.endpoint(min_ready=MinReady(count=2)),
        u.worker(),
    )
    run = RunState(units, u.plan(units, count=1, gpus=4))
    run.handle(PreflightReported(PreflightReport("n1")))
    run.handle(PreflightOver(120.0))
    for name in ("m@0", "m@1", "m@2", "helper", "endpoint", "worker"):
        run.handle(_to(name, S.READY))
    return run


def _rotation(run: RunState, decisions: list[Decision]) -> list[str] | None:
    """The endpoint's rotation after ``decisions`` (None: they changed nothing in it)."""
    published = [d for d in decisions if isinstance(d, PublishLanes)]
    return [lane.instance for lane in run.ready_lanes().lanes] if published else None


def _kinds(decisions: list[Decision]) -> list[str]:
    return [type(d).__name__ for d in decisions if not isinstance(d, PublishLanes)]


def test_a_rolling_restart_drains_each_lane_and_waits_for_it_to_be_ready() -> None:
    run = _serving()
    assert run.restart_targets(("m",)) == ("m@0", "m@1", "m@2")
    first = run.handle(RestartRequested(1, ("m@0", "m@1", "m@2"), rolling=True))
    assert _rotation(run, first) == ["m@1", "m@2"]  # out of the rotation before anything else
    assert [d for d in first if isinstance(d, AwaitDrain)] == [AwaitDrain("m@0", 7.0)]
    assert _kinds(first) == ["AwaitDrain"]  # nothing is stopped while requests are in flight
    assert run.handle(Drained("m@1")) == []  # not draining: ignored
    restart = run.handle(Drained("m@0"))
    assert restart == [RestartOn(LANES, ("m@0",), "restart requested (ddsup restart)")]
    assert run.handle(_to("m@0", S.READY)) == []  # the old process: not back yet
    run.handle(_to("m@0", S.RESTARTING))
    run.handle(_to("m@0", S.STARTING))
    back = run.handle(_to("m@0", S.READY))
    assert _rotation(run, back) == ["m@0", "m@2"]  # m@0 rejoined, m@1 left: the next one drains
    assert [d for d in back if isinstance(d, AwaitDrain)] == [AwaitDrain("m@1", 7.0)]
    job = run.restarts.job(1)
    assert job is not None and [job.steps[i] for i in job.order] == [
        RestartStep.READY,
        RestartStep.DRAINING,
        RestartStep.QUEUED,
    ]
    run.handle(Drained("m@1", timed_out=True))  # the endpoint never said: restarted anyway
    run.handle(_to("m@1", S.RESTARTING))
    run.handle(_to("m@1", S.FAILED))  # it did not come back: the rest is skipped
    assert [job.steps[i] for i in job.order] == [
        RestartStep.READY,
        RestartStep.FAILED,
        RestartStep.SKIPPED,
    ]
    assert job.over and not job.ok


def test_all_at_once_and_services_need_no_drain() -> None:
    run = _serving()
    decisions = run.handle(RestartRequested(1, ("m@0", "m@2", "helper")))
    assert _rotation(run, decisions) == ["m@1"]
    assert _kinds(decisions) == ["AwaitDrain", "AwaitDrain", "RestartOn"]
    assert (
        RestartOn(Host("n1", agent=False), ("helper",), "restart requested (ddsup restart)")
        in decisions
    )


def test_without_a_running_endpoint_lanes_restart_at_once() -> None:
    units = u.unit_set(u.lane("m@", replicas=1), u.endpoint())
    run = RunState(units, u.plan(units, count=1, gpus=1))
    run.handle(PreflightReported(PreflightReport("n1")))
    run.handle(PreflightOver(120.0))
    run.handle(_to("m@0", S.READY))  # the endpoint starts now, but it is not up yet
    run.handle(_to("endpoint", S.FAILED))
    assert _kinds(run.handle(RestartRequested(1, ("m@0",)))) == ["RestartOn"]


@pytest.mark.parametrize(
    ("names", "why"),
    [
        (("worker",), "worker: the worker's end ends the run"),
        (("endpoint",), "endpoint: restarting the endpoint would fail the requests"),
        (
            ("nope",),
            "no unit instance 'nope' in this run (instances: helper, m@0, m@1, m@2, endpoint, worker)",
        ),
    ],
)
def test_what_cannot_be_restarted_is_refused_with_the_reason(
    names: tuple[str, ...], why: str
) -> None:
    with pytest.raises(RestartRefused, match=why.replace("(", r"\(").replace(")", r"\)")):
        _serving().restart_targets(names)


def test_instances_not_started_busy_or_stopping_are_refused() -> None:
    units = u.unit_set(u.lane("m@", replicas=2))
    run = RunState(units, u.plan(units, count=1, gpus=2))
    with pytest.raises(RestartRefused, match="m@0 has not started yet"):
        run.restart_targets(("m@0",))
    serving = _serving()
    serving.handle(RestartRequested(1, ("m@0",)))
    with pytest.raises(RestartRefused, match="m@0 is being restarted already"):
        serving.restart_targets(("m",))
    assert serving.restart_targets(("m@1:0",)) == ("m@1",)  # a rank names its replica
    serving.handle(StopBegins())
    with pytest.raises(RestartRefused, match="the run is stopping"):
        serving.restart_targets(("m@1",))
    job = serving.restarts.job(1)
    assert job is not None and job.steps["m@0"] is RestartStep.FAILED  # abandoned


def test_a_failed_lane_is_started_again_and_no_longer_final() -> None:
    run = _serving()
    run.handle(_to("m@2", S.FAILED))
    assert run.is_final("m@2")
    decisions = run.handle(RestartRequested(1, run.restart_targets(("m@2",))))
    assert _kinds(decisions) == ["RestartOn"] and not run.is_final("m@2")
