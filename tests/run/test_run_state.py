"""The run's decisions, without processes: feed :class:`RunState` inputs, read decisions.

Each test states one rule a user relies on (start order, the endpoint's quorum, what a
failure means, which cause wins, what a stop sends where) against the real placement of
small unit sets. The end-to-end tests in ``tests/engine`` check the same rules through
``ddsup start``; these pin the rules themselves, cheaply and exactly.
"""

from __future__ import annotations

import signal
from dataclasses import replace

import pytest

from ddsup._errors import ResultStatus
from ddsup.channel._messages import LanesChanged, LanesUpdate, PreflightReport, ReadyLane
from ddsup.decide._ordering import agent_nodes, survivable
from ddsup.decide._run_inputs import (
    AgentGone,
    AgentProcessExited,
    AgentSignalled,
    Decision,
    EndRun,
    Host,
    KillEverything,
    Observed,
    PlanPorted,
    PreflightOver,
    PreflightReported,
    PublishLanes,
    Record,
    SignalOn,
    SignalToForward,
    StartOn,
    StopBegins,
    StopOn,
    StopRequested,
    StopSignalled,
)
from ddsup.decide._run_state import RunState
from ddsup.process import ExitStatus
from ddsup.record._events import (
    COMPLETED,
    KillingEverything,
    RunEnding,
    RunStopping,
    SignalForwarded,
    UnitTransition,
)
from ddsup.record._states import InstanceState as S
from ddsup.units._model import MinReady, OnFailure, Placement, Unit
from support import units as u

CLIENT = Host("n1", agent=False)


def _to(instance: str, to: S, reason: str = "", **fields: object) -> Observed:
    return Observed(
        UnitTransition(
            instance=instance,
            node="n1",
            from_state=S.STARTING,
            to_state=to,
            reason=reason or to.value,
            **fields,  # type: ignore[arg-type]
        )
    )


def _starts(decisions: list[Decision]) -> list[tuple[Host, tuple[str, ...]]]:
    return [(d.host, d.instances) for d in decisions if isinstance(d, StartOn)]


def _outcome(decisions: list[Decision]) -> tuple[ResultStatus, int, str | None]:
    [end] = [d for d in decisions if isinstance(d, EndRun)]
    records = [d.event for d in decisions if isinstance(d, Record)]
    assert RunEnding(outcome=end.outcome, time=records[-1].time) in records
    return end.outcome.status, end.outcome.exit_code, end.outcome.unit


def _run(*units: Unit) -> RunState:
    """A run of ``units`` on two nodes of two GPUs each; the client is n1."""
    unit_set = u.unit_set(*units)
    return RunState(unit_set, u.plan(unit_set))


def _preflight(run: RunState) -> list[Decision]:
    """Every agent reports a clean preflight; then it is over."""
    for node in run.layout.agent_nodes():
        run.handle(PreflightReported(PreflightReport(node)))
    return run.handle(PreflightOver(120.0))


def _records(decisions: list[Decision]) -> list[type]:
    return [type(d.event) for d in decisions if isinstance(d, Record)]


# --- start readiness ----------------------------------------------------------------------
def test_nothing_starts_before_preflight_then_after_chains_are_followed() -> None:
    run = _run(
        u.service("a", oneshot=True),
        u.service("b", after=("a",)),
        u.service("c", after=("b",)),
        u.worker(after=("c",)),
    )
    assert _starts(run.handle(_to("c", S.STARTING))) == []  # preflight not over: nothing starts
    assert _starts(run.handle(PreflightOver(120.0))) == [(CLIENT, ("a",))]
    assert _starts(run.handle(_to("a", S.EXITED, COMPLETED))) == [(CLIENT, ("b",))]
    assert _starts(run.handle(_to("b", S.READY))) == [(CLIENT, ("c",))]
    assert _starts(run.handle(_to("b", S.RESTARTING))) == []  # ready once is enough
    assert _starts(run.handle(_to("c", S.READY))) == [(CLIENT, ("worker",))]
    assert _starts(run.handle(_to("c", S.READY))) == []  # each instance starts once


def test_an_instance_waits_for_every_instance_of_its_after_units_in_plan_order() -> None:
    """What each instance waits for, against the rule read literally (each instance of
    each unit named in its ``after``, the endpoint for the worker, in plan order)."""
    run = _run(
        u.lane("a@", replicas=3),
        u.lane("b@", replicas=1),
        u.service("s", oneshot=True),
        u.service("t", after=("b", "s", "a")),
        u.endpoint(min_ready=MinReady(count=1)),
        u.worker(after=("t",)),
    )
    plan, units = run.layout.plan, run.layout.units
    for planned in plan.instances:
        unit = units.by_name(planned.unit)
        names = {units.by_name(d).name for d in unit.after} | (
            {"endpoint"} if planned.unit == "worker" else set()
        )
        literal = tuple(p.instance for p in plan.instances if p.unit in names)
        assert run.layout.after[planned.instance] == literal, planned.instance
    assert set(run.layout.after["t"]) == {"a@0", "a@1", "a@2", "b@0", "s"}
    assert set(run.layout.after["worker"]) == {"t", "endpoint"}
    assert run.layout.after["a@1"] == ()


def test_a_oneshot_that_exits_otherwise_has_not_completed() -> None:
    run = _run(u.service("a", oneshot=True), u.service("b", after=("a",)))
    run.handle(PreflightOver(120.0))
    assert _starts(run.handle(_to("a", S.EXITED, "stopped"))) == []


def test_the_endpoint_waits_for_its_quorum_of_every_model_and_the_worker_for_it() -> None:
    run = _run(
        u.lane("a@", replicas=2),
        u.lane("b@", replicas=2),
        u.endpoint(min_ready=MinReady(count=1)),
        u.worker(),
    )
    assert _starts(_preflight(run)) == [
        (Host("n1", agent=True), ("a@0", "a@1")),
        (Host("n2", agent=True), ("b@0", "b@1")),
    ]
    assert _starts(run.handle(_to("a@0", S.READY))) == []  # model b has no ready lane yet
    assert _starts(run.handle(_to("a@0", S.RESTARTING))) == []
    assert _starts(run.handle(_to("b@1", S.READY))) == []  # a@0 is not ready any more
    assert _starts(run.handle(_to("a@1", S.READY))) == [(CLIENT, ("endpoint",))]
    assert _starts(run.handle(_to("endpoint", S.READY))) == [(CLIENT, ("worker",))]


def test_percent_quorum_rounds_up() -> None:
    run = _run(u.lane("a@", replicas=3), u.endpoint(min_ready=MinReady(percent=50.0)))
    _preflight(run)
    assert _starts(run.handle(_to("a@2", S.READY))) == []
    assert _starts(run.handle(_to("a@0", S.READY))) == [(CLIENT, ("endpoint",))]  # 2 of 3


def test_agents_report_preflight_then_ports_are_planned_and_lanes_published() -> None:
    units = u.unit_set(u.lane("a@", replicas=2), u.endpoint())
    run = RunState(units, u.plan(units, count=2, gpus=1))
    assert run.layout.agent_nodes() == ("n1", "n2") and not run.preflight_complete
    run.handle(PreflightReported(PreflightReport("n1", (), {"a@0": 8100})))
    run.handle(PreflightReported(PreflightReport("n2", (), {"a@1": 8200})))
    assert run.preflight_complete
    decisions = run.handle(PreflightOver(120.0))
    [ported] = [d for d in decisions if isinstance(d, PlanPorted)]
    assert {i.instance: i.port for i in ported.plan.instances if i.port} == {
        "a@0": 8100,
        "a@1": 8200,
        "endpoint": 9000,
    }
    assert _starts(decisions) == [(Host("n1", True), ("a@0",)), (Host("n2", True), ("a@1",))]
    [publish] = [d for d in run.handle(_to("a@1", S.READY)) if isinstance(d, PublishLanes)]
    lane = ReadyLane("a@1", "a", "http://10.0.0.2:8200", served_names=("a",))
    assert publish.changed == LanesChanged(added=(lane,))
    assert run.ready_lanes() == LanesUpdate(publish.changed.added, ("a",), ("a",))
    assert [d for d in run.handle(_to("a@1", S.READY)) if isinstance(d, PublishLanes)] == []


def _published(decisions: list[Decision]) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    return [
        (tuple(lane.instance for lane in d.changed.added), d.changed.removed)
        for d in decisions
        if isinstance(d, PublishLanes)
    ]


def test_the_feed_gets_each_lane_that_comes_or_goes_and_a_new_subscriber_the_whole_set() -> None:
    """One change per lane that joins or leaves the ready set, never the whole set again;
    ``ready_lanes`` (what a new subscriber gets first) is the set in plan order."""
    units = u.unit_set(u.lane("a@", replicas=4), u.endpoint(min_ready=MinReady(count=1)))
    run = RunState(units, u.plan(units, count=2, gpus=2))
    run.handle(PreflightOver(120.0))
    assert _published(run.handle(_to("a@2", S.READY))) == [(("a@2",), ())]
    assert _published(run.handle(_to("a@0", S.READY))) == [(("a@0",), ())]
    assert [lane.instance for lane in run.ready_lanes().lanes] == ["a@0", "a@2"]
    assert _published(run.handle(_to("a@2", S.RESTARTING))) == [((), ("a@2",))]
    assert _published(run.handle(_to("a@2", S.STARTING))) == []
    assert _published(run.handle(_to("endpoint", S.READY))) == []  # not a lane
    assert [lane.instance for lane in run.ready_lanes().lanes] == ["a@0"]


def test_an_unresponsive_lane_leaves_the_rotation_and_returns_when_ready_again() -> None:
    run = _run(u.lane("a@", replicas=2), u.endpoint(min_ready=MinReady(count=1)))
    _preflight(run)
    run.handle(_to("a@0", S.READY))
    run.handle(_to("a@1", S.READY))

    assert _published(run.handle(_to("a@0", S.UNRESPONSIVE))) == [((), ("a@0",))]
    assert _published(run.handle(_to("a@0", S.READY))) == [(("a@0",), ())]
    assert [lane.instance for lane in run.ready_lanes().lanes] == ["a@0", "a@1"]


def test_preflight_problems_or_silence_end_the_run_69_and_nothing_starts() -> None:
    units = u.unit_set(u.lane("a@", replicas=2))
    run = RunState(units, u.plan(units, count=2, gpus=1))
    run.handle(PreflightReported(PreflightReport("n2", ("port 8000 planned for a@1 is busy",))))
    decisions = run.handle(PreflightOver(120.0))
    assert _outcome(decisions) == (ResultStatus.PREFLIGHT_FAILED, 69, None)
    assert "no agent reported from node(s) n1 within 120s" in decisions[-1].outcome.reason  # type: ignore[union-attr]
    run = RunState(units, u.plan(units, count=2, gpus=1))
    for node in ("n1", "n2"):
        run.handle(PreflightReported(PreflightReport(node, (f"{node} is wrong",))))
    decisions = run.handle(PreflightOver(120.0))
    assert _outcome(decisions)[:2] == (ResultStatus.PREFLIGHT_FAILED, 69)
    assert _starts(decisions) == []


# --- how a run ends -----------------------------------------------------------------------
def test_the_worker_ends_the_run_with_its_own_status() -> None:
    for exit, status, code in [
        (ExitStatus(code=0), ResultStatus.OK, 0),
        (ExitStatus(code=3), ResultStatus.WORKER_FAILED, 3),
        (ExitStatus(signal=9), ResultStatus.WORKER_FAILED, 137),
    ]:
        run = _run(u.worker())
        run.handle(PreflightOver(120.0))
        decisions = run.handle(_to("worker", S.EXITED, exit=exit))
        assert _outcome(decisions) == (status, code, "worker")


def test_a_unit_failed_for_good_ends_the_run_70_or_75_and_the_first_cause_wins() -> None:
    run = _run(u.service("svc"), u.worker())
    run.handle(PreflightOver(120.0))
    failed = run.handle(_to("svc", S.FAILED, "start limit hit", readiness_timeout=True))
    assert _outcome(failed) == (ResultStatus.READINESS_TIMEOUT, 75, "svc")
    assert run.handle(StopSignalled(signal.SIGTERM)) == []  # already ending: changes nothing
    assert run.handle(_to("worker", S.EXITED, exit=ExitStatus(code=0))) == []
    assert run.outcome is not None and run.outcome.exit_code == 75
    run = _run(u.service("svc"))
    run.handle(PreflightOver(120.0))
    assert _outcome(run.handle(_to("svc", S.FAILED, exit=ExitStatus(code=4)))) == (
        ResultStatus.UNIT_FAILED,
        70,
        "svc",
    )
    assert run.outcome is not None and run.outcome.exit == ExitStatus(code=4)


def test_on_failure_continue_stops_the_units_that_require_it() -> None:
    run = _run(
        u.service("flaky", on_failure=OnFailure.CONTINUE),
        u.service("dependent", after=("flaky",), requires=("flaky",)),
        u.service("bystander"),
    )
    run.handle(PreflightOver(120.0))
    decisions = run.handle(_to("flaky", S.FAILED))
    assert run.outcome is None
    assert decisions == [StopOn(CLIENT, ("dependent",), "a required unit failed")]


def test_stop_signals_operators_and_agents_end_the_run_as_stopped() -> None:
    run = _run(u.worker())
    assert _outcome(run.handle(StopSignalled(signal.SIGINT))) == (ResultStatus.STOPPED, 130, None)
    second = run.handle(StopSignalled(signal.SIGTERM))
    assert _records(second) == [KillingEverything] and second[-1] == KillEverything()
    assert run.killing and run.handle(StopSignalled(signal.SIGTERM)) == []
    run = _run(u.worker())
    assert _outcome(run.handle(StopRequested())) == (ResultStatus.STOPPED, 143, None)
    assert run.outcome is not None and run.outcome.reason == "ddsup stop"
    run = _run(u.worker())
    decisions = run.handle(AgentSignalled("n2", signal.SIGTERM))
    assert _outcome(decisions) == (ResultStatus.STOPPED, 143, None)
    assert run.outcome is not None and run.outcome.reason == "the agent on n2 received SIGTERM"


def test_a_lost_agent_ends_the_run_70_and_its_instances_are_final() -> None:
    units = u.unit_set(u.lane("a@", replicas=2))
    run = RunState(units, u.plan(units, count=2, gpus=1))
    decisions = run.handle(AgentGone("n2", "lost the agent on n2: connection lost"))
    assert _outcome(decisions) == (ResultStatus.UNIT_FAILED, 70, "agent on n2")
    assert run.is_final("a@1") and not run.is_final("a@0")
    run = RunState(units, u.plan(units, count=2, gpus=1))
    exited = run.handle(AgentProcessExited("agent on n1", ExitStatus(signal=9), ("n1",)))
    assert _outcome(exited) == (ResultStatus.UNIT_FAILED, 70, "agent on n1")
    assert run.outcome is not None and run.outcome.exit == ExitStatus(signal=9)
    assert run.is_final("a@0") and not run.layout.survives_node_loss()


GO_ON = {"on_failure": OnFailure.CONTINUE}


@pytest.mark.parametrize(
    ("units", "survives"),
    [
        ((u.lane("a@", replicas=2, service=GO_ON), u.lane("b@", replicas=2)), True),
        ((u.lane("a@", replicas=4, service=GO_ON),), True),
        ((u.lane("a@", replicas=4, service=GO_ON), u.service("s", on=Placement.EACH_NODE)), False),
        (
            (
                u.lane("a@", replicas=4, service=GO_ON),
                u.service("s", on=Placement.EACH_NODE, on_failure=OnFailure.CONTINUE),
            ),
            True,
        ),
        ((u.lane("a@", replicas=2), u.lane("b@", replicas=2)), False),
    ],
)
def test_a_run_survives_a_node_loss_when_some_agent_node_runs_only_continuing_units(
    units: tuple[Unit, ...], survives: bool
) -> None:
    """Against the rule read literally: some agent node, all of whose units continue."""
    unit_set = u.unit_set(*units)
    plan = u.plan(unit_set)  # two nodes of two GPUs: a@ fills n1 first
    literal = any(survivable(unit_set, plan, n) for n in agent_nodes(unit_set, plan))
    assert RunState(unit_set, plan).layout.survives_node_loss() is literal is survives


def _lost_lanes(decisions: list[Decision]) -> list[tuple[str, str]]:
    return [
        (d.event.instance, d.event.reason)
        for d in decisions
        if isinstance(d, Record) and isinstance(d.event, UnitTransition)
    ]


def test_a_lost_node_whose_units_all_continue_fails_them_and_the_run_goes_on() -> None:
    go_on = {"on_failure": OnFailure.CONTINUE}
    units = u.unit_set(
        u.lane("a@", replicas=4, service=go_on),
        u.endpoint(min_ready=MinReady(percent=50.0)),
        u.worker(),
    )
    run = RunState(units, u.plan(units))  # a@0, a@1 on n1; a@2, a@3 on n2
    assert run.layout.survives_node_loss()
    _preflight(run)
    for lane in ("a@0", "a@1", "a@2", "a@3"):
        run.handle(_to(lane, S.READY))
    decisions = run.handle(AgentGone("n2", "lost the agent on n2: connection lost"))
    assert _lost_lanes(decisions) == [
        ("a@2", "lost with its node: lost the agent on n2: connection lost"),
        ("a@3", "lost with its node: lost the agent on n2: connection lost"),
    ]
    [publish] = [d for d in decisions if isinstance(d, PublishLanes)]  # both lanes at once
    assert publish.changed == LanesChanged(removed=("a@2", "a@3"))
    assert [lane.instance for lane in run.ready_lanes().lanes] == ["a@0", "a@1"]
    assert run.outcome is None and run.is_final("a@3")
    assert run.status_rows()[2].state is S.FAILED
    exited = AgentProcessExited("agent on n2", ExitStatus(signal=9), ("n2",))
    assert run.handle(exited) == []  # the same loss, heard twice
    # one more lane gone for good: 1 of 4 left, min_ready 50% needs 2
    decisions = run.handle(_to("a@0", S.FAILED, "start limit hit"))
    assert _outcome(decisions) == (ResultStatus.UNIT_FAILED, 70, "lanes of a")
    assert run.outcome is not None
    assert "1 of 4 lanes of a are left" in run.outcome.reason
    assert "min_ready needs 2" in run.outcome.reason


def test_a_lost_node_takes_down_the_other_ranks_of_its_replicas() -> None:
    go_on = {"on_failure": OnFailure.CONTINUE}
    units = u.unit_set(u.lane("a@", nodes=2, replicas=2, service=go_on), u.endpoint())
    run = RunState(units, u.plan(units, count=2, gpus=2))  # a@0 and a@1 on n1, ranks on n2
    _preflight(run)
    for rank in ("a@0", "a@0:1", "a@1", "a@1:1"):
        run.handle(_to(rank, S.READY))
    decisions = run.handle(AgentGone("n2", "went away"))
    assert [i for i, _ in _lost_lanes(decisions)] == ["a@0:1", "a@1:1"]
    stops = [(d.host, d.instances) for d in decisions if isinstance(d, StopOn)]
    assert stops == [(Host("n1", True), ("a@0",)), (Host("n1", True), ("a@1",))]
    # min_ready 100%: both replicas must stay; they are stopped, and once final the run ends
    assert run.outcome is None
    assert _outcome(run.handle(_to("a@0", S.EXITED)))[2] == "lanes of a"


def test_once_stopping_failures_are_the_stop_and_nothing_starts() -> None:
    run = _run(u.service("a"), u.service("b", after=("a",)), u.worker())
    run.handle(PreflightOver(120.0))
    run.handle(StopSignalled(signal.SIGTERM))
    assert _records(run.handle(StopBegins())) == [RunStopping] and run.stopping
    assert run.handle(_to("a", S.READY)) == []  # b would be due, but the run is stopping
    assert run.handle(_to("a", S.FAILED)) == []
    assert run.handle(AgentGone("n2", "went away")) == []
    assert run.outcome is not None and run.outcome.status is ResultStatus.STOPPED


def test_forwarded_signals_go_to_the_units_that_ask_for_them() -> None:
    usr1 = {"forward_signals": (signal.SIGUSR1,)}
    run = _run(u.lane("a@", replicas=2, service=usr1), u.worker(service=usr1), u.service("quiet"))
    decisions = run.handle(SignalToForward(signal.SIGUSR1))
    assert isinstance(decisions[0], Record) and isinstance(decisions[0].event, SignalForwarded)
    assert decisions[1:] == [
        SignalOn(Host("n1", True), ("a@0", "a@1"), signal.SIGUSR1),
        SignalOn(CLIENT, ("worker",), signal.SIGUSR1),
    ]


# --- the stop sequence --------------------------------------------------------------------
def test_a_stop_level_stops_what_can_report_and_waits_for_it() -> None:
    run = _run(
        u.lane("a@"),
        u.lane("z@"),
        u.service("never", after=("z",)),  # z@0 never reports: this never starts
        u.worker(after=("a",)),
    )
    _preflight(run)
    assert _starts(run.handle(_to("a@0", S.READY))) == [(CLIENT, ("worker",))]
    run.handle(StopRequested())
    run.handle(StopBegins())
    levels = run.layout.stop_levels()
    names = [sorted(p.instance for p in level) for level in levels]
    assert names == [["never", "worker"], ["a@0", "z@0"]]
    decisions, awaited = run.stop_level(levels[0])
    assert decisions == [StopOn(CLIENT, ("worker",))] and awaited == {"worker"}
    decisions, awaited = run.stop_level(levels[1])
    assert decisions == [StopOn(Host("n1", True), ("a@0", "z@0"))]
    assert awaited == {"a@0"}  # z@0 never reported: its agent will not either
    run.handle(_to("a@0", S.EXITED))
    assert run.stop_level(levels[1])[1] == set()


def test_each_agent_is_sent_its_own_node_of_the_plan() -> None:
    """An agent's set-up carries its node and its instances, not the whole allocation."""
    units = u.unit_set(u.lane("a@", replicas=4), u.endpoint())
    run = RunState(units, u.plan(units, count=2, gpus=2))
    part = run.layout.node_plan("n2")
    assert [n.name for n in part.nodes] == ["n2"]
    assert [p.instance for p in part.instances] == [
        p.instance for p in run.plan.instances if p.node == "n2"
    ]
    assert part.client == run.plan.client and part.endpoint_url == run.plan.endpoint_url
    run.handle(PreflightReported(PreflightReport("n2", (), {"a@2": 8300})))
    run.handle(PreflightReported(PreflightReport("n1", ())))
    run.handle(PreflightOver(120.0))
    assert {p.instance: p.port for p in run.layout.node_plan("n2").instances}["a@2"] == 8300


class _CountingInstances(tuple):  # type: ignore[type-arg]
    """The plan's instances, counting the walks over them."""

    walks = 0

    def __iter__(self):  # type: ignore[no-untyped-def]
        _CountingInstances.walks += 1
        return super().__iter__()


def test_an_event_never_walks_every_instance_of_the_plan() -> None:
    """At 1,024 lanes, each event walked the plan (the ready set, node lookups, replica
    peers, the quorum): 1,000 events × 1,000 instances. Events now cost the same at any
    size; only a new feed subscriber or ``status`` reads every instance."""
    units = u.unit_set(u.lane("a@", replicas=16), u.endpoint())
    plan = u.plan(units, count=4, gpus=4)
    counted = replace(plan, instances=_CountingInstances(plan.instances))
    run = RunState(units, counted)
    run.handle(PreflightOver(120.0))
    _CountingInstances.walks = 0
    for index in range(16):
        run.handle(_to(f"a@{index}", S.STARTING))
        run.handle(_to(f"a@{index}", S.READY))
        run.handle(_to(f"a@{index}", S.RESTARTING))
        run.handle(_to(f"a@{index}", S.READY))
    assert _CountingInstances.walks == 0
    assert len(run.ready_lanes().lanes) == 16 and _CountingInstances.walks == 1


# --- status -------------------------------------------------------------------------------
def test_status_rows_follow_each_event_and_the_ports_preflight_picked() -> None:
    """``ddsup status`` asks again and again: a row is rebuilt only when its record
    changed, yet every answer says what the events and the ported plan say now."""
    units = u.unit_set(u.lane("a@", replicas=2), u.endpoint())
    run = RunState(units, u.plan(units, count=2, gpus=1))
    before = run.status_rows()
    assert [(r.instance, r.state, r.port) for r in before] == [
        ("a@0", S.WAITING, None),  # for preflight on every node
        ("a@1", S.WAITING, None),
        ("endpoint", S.WAITING, 9000),
    ]
    run.handle(PreflightReported(PreflightReport("n1", (), {"a@0": 8100})))
    run.handle(PreflightReported(PreflightReport("n2", (), {"a@1": 8200})))
    run.handle(PreflightOver(120.0))
    run.handle(_to("a@1", S.READY))
    rows = run.status_rows()
    assert [(r.instance, r.state, r.port) for r in rows] == [
        ("a@0", S.INACTIVE, 8100),  # told to start, no event yet
        ("a@1", S.READY, 8200),
        ("endpoint", S.WAITING, 9000),  # for min_ready: a 1 of 2 lanes ready
    ]
    assert rows[1].model == "a" and rows[1].probe == "none"
    again = run.status_rows()
    assert all(old is new for old, new in zip(rows, again, strict=True))  # nothing changed
    run.handle(_to("a@0", S.READY))
    after = run.status_rows()
    assert after[0].state is S.READY and after[0] is not rows[0] and after[1] is rows[1]
