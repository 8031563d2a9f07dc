"""The replica policy on its own: a multi-node replica lives and dies as one.

Any rank's end (0 included) takes every other rank down; once all are held the replica
restarts whole, rank 0 first and the others on the port it reports, counted once against
the start limit; past the limit it fails as one. A rank's final exit (``restart = "no"``)
stops its peers. Single-node replicas are left alone.
"""

from __future__ import annotations

import signal

from ddsup.decide._replicas import ReplicaPolicy, Verdict
from ddsup.decide._run_inputs import FailOn, Host, ResumeOn, StopOn, TakeDownOn
from ddsup.plan import Plan
from ddsup.process import ExitStatus
from ddsup.record._events import UnitTransition
from ddsup.record._instance import InstanceRecord
from ddsup.record._states import InstanceState as S
from ddsup.units._model import UnitSet
from support import units as u

# two replicas of two ranks each: lane@0 (n1) + lane@0:1 (n2), lane@1 (n3) + lane@1:1 (n4)
SERVICE = {"restart_sec": 1.0, "start_limit_burst": 2, "start_limit_interval": 3600.0}
MULTI = u.unit_set(
    u.lane("lane@", gpus=2, nodes=2, replicas=2, kill_signal=signal.SIGINT, service=SERVICE)
)
PLAN = u.plan(MULTI, count=4, gpus=2)
HELD = "; the replica restarts as one"


def _on(node: str) -> Host:
    return Host(node, agent=True)


class _Run:
    """The policy fed transitions, with the records the run's state would keep."""

    def __init__(self, units: UnitSet = MULTI, plan: Plan = PLAN) -> None:
        self.policy = ReplicaPolicy(units, plan)
        self.records: dict[str, InstanceRecord] = {}
        self.time = 0.0

    def to(self, instance: str, state: S, reason: str = "", **fields: object) -> Verdict:
        self.time += 1.0
        event = UnitTransition(
            instance=instance,
            node=None,
            from_state=S.INACTIVE,
            to_state=state,
            reason=reason or state.value,
            time=self.time,
            **fields,  # type: ignore[arg-type]
        )
        self.records[instance] = self.records.get(instance, InstanceRecord()).apply(event)
        return self.policy.observe(event, self.records)

    def up(self) -> None:
        for rank in ("lane@0", "lane@0:1"):
            self.to(rank, S.STARTING)
            self.to(rank, S.READY)


def test_the_plan_has_two_replicas_of_two_ranks() -> None:
    ranks = {p.instance: (p.node, p.rank, p.nnodes) for p in PLAN.instances}
    assert ranks == {
        "lane@0": ("n1", 0, 2),
        "lane@0:1": ("n2", 1, 2),
        "lane@1": ("n3", 0, 2),
        "lane@1:1": ("n4", 1, 2),
    }


def test_a_follower_down_takes_rank_0_down_then_the_replica_restarts_whole() -> None:
    run = _Run()
    run.up()
    down = run.to("lane@0:1", S.RESTARTING, "exit status 1" + HELD, exit=ExitStatus(code=1))
    assert down.decisions == [
        TakeDownOn(_on("n1"), ("lane@0",), "lane@0:1 went down (exit status 1)")
    ]
    [resume] = run.to("lane@0", S.RESTARTING, "lane@0:1 went down" + HELD).decisions
    assert isinstance(resume, ResumeOn)
    assert (resume.host, resume.instances, resume.attempt, resume.master_port) == (
        _on("n1"),
        ("lane@0",),
        1,  # rank 0 was ready: the count of failed attempts in a row starts again
        None,  # rank 0 picks the port: the planned one while it is free
    )
    assert 0.9 <= resume.delay <= 1.1  # restart_sec, with jitter
    followers = run.to("lane@0", S.STARTING, master_port=31234).decisions
    assert followers == [ResumeOn(_on("n2"), ("lane@0:1",), 0.0, 1, 31234)]
    assert run.to("lane@0:1", S.STARTING).decisions == []


def test_any_rank_down_even_exit_0_and_rank_0_alike() -> None:
    run = _Run()
    run.up()
    down = run.to("lane@0", S.RESTARTING, "exit status 0" + HELD, exit=ExitStatus(code=0))
    assert down.decisions == [
        TakeDownOn(_on("n2"), ("lane@0:1",), "lane@0 went down (exit status 0)")
    ]


def test_counted_once_against_the_start_limit_then_failed_as_one() -> None:
    """start_limit_burst = 2: the first start and one restart; the next end is the last."""
    run = _Run()
    run.up()
    run.to("lane@0:1", S.RESTARTING, "exit status 1" + HELD)
    run.to("lane@0", S.RESTARTING, "taken down" + HELD)
    run.to("lane@0", S.STARTING, master_port=31234)
    run.to("lane@0:1", S.STARTING)
    timeout = "not ready within timeout_start = 1m (last probe: HTTP 503)"
    run.to("lane@0", S.RESTARTING, timeout + HELD, readiness_timeout=True)
    verdict = run.to("lane@0:1", S.RESTARTING, "taken down" + HELD)
    reason = f"start limit hit: 2 starts within 1h (start_limit_burst = 2); last: lane@0: {timeout}"
    assert verdict.decisions == [
        FailOn(_on("n1"), ("lane@0",), reason, True),
        FailOn(_on("n2"), ("lane@0:1",), reason, True),
    ]
    assert verdict.failure is not None
    assert (verdict.failure.instance, verdict.failure.readiness_timeout) == ("lane@0", True)


def test_the_backoff_starts_over_once_the_replica_stayed_ready_for_restart_max_sec() -> None:
    """Crashing at once, the replica waits restart_sec, then twice that, up to the cap;
    once it has served for restart_max_sec (rank 0 ready until a rank went down), its
    next restart waits restart_sec again."""
    service = {"restart_sec": 1.0, "restart_max_sec": 4.0, "start_limit_burst": 10}
    units = u.unit_set(u.lane("lane@", gpus=2, nodes=2, replicas=1, service=service))
    run = _Run(units, u.plan(units, count=2, gpus=2))
    run.up()
    delays = []
    for served in (0.0, 0.0, 0.0, 0.0, 4.0, 0.0):
        run.time += served
        run.to("lane@0:1", S.RESTARTING, "exit status 1" + HELD)
        [resume] = run.to("lane@0", S.RESTARTING, "taken down" + HELD).decisions
        assert isinstance(resume, ResumeOn)
        delays.append(resume.delay)
        run.to("lane@0", S.STARTING, master_port=31234)
        run.to("lane@0:1", S.STARTING)
        run.to("lane@0", S.READY)
    bases = [1.0, 2.0, 4.0, 4.0, 1.0, 2.0]  # the first three were ready 1-3 s, under the cap
    for delay, base in zip(delays, bases, strict=True):
        assert base * 0.9 <= delay <= min(base * 1.1, 4.0), (delays, bases)


def test_a_rank_told_to_resume_is_taken_down_too() -> None:
    """Rank 0 ends again before the follower's resumed start was seen: the follower
    (still restarting in the records) is taken down with it, not left to start alone."""
    run = _Run()
    run.up()
    run.to("lane@0:1", S.RESTARTING, "exit status 1" + HELD)
    run.to("lane@0", S.RESTARTING, "taken down" + HELD)
    run.to("lane@0", S.STARTING, master_port=31234)  # the follower is told to resume
    down = run.to("lane@0", S.RESTARTING, "exit status 1" + HELD)
    assert down.decisions == [
        TakeDownOn(_on("n2"), ("lane@0:1",), "lane@0 went down (exit status 1)")
    ]


def test_a_final_exit_stops_the_other_ranks() -> None:
    run = _Run()
    run.up()
    stop = run.to("lane@0", S.FAILED, "exit status 0").decisions  # restart = "no"
    assert stop == [StopOn(_on("n2"), ("lane@0:1",), "lane@0 ended: exit status 0")]
    assert run.to("lane@0:1", S.RESTARTING, "x" + HELD).decisions == []  # over for good


def test_single_node_replicas_have_no_policy() -> None:
    single = u.unit_set(u.lane("lane@", replicas=2))
    plan = u.plan(single)
    policy = ReplicaPolicy(single, plan)
    event = UnitTransition(
        instance="lane@0", node="n1", from_state=S.READY, to_state=S.RESTARTING, reason="x"
    )
    assert policy.observe(event, {}) == Verdict()
    assert policy.replica_of("lane@0") == ("lane@0",)
