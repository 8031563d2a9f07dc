"""The replica policy on its own: a multi-node replica lives and dies as one.

A rank that restarts makes its running peers restart (their unit's ``kill_signal``); a
rank that fails for good stops them. Ranks of other replicas, peers that are not running
and single-node replicas are left alone.
"""

from __future__ import annotations

import signal

import pytest

from ddsup.record._instance import InstanceRecord
from ddsup.record._states import InstanceState as S
from ddsup.run._replicas import take_down_peers
from ddsup.run._run_inputs import Host, SignalOn, StopOn
from support import units as u

# two replicas of two ranks each: lane@0 (n1) + lane@0:1 (n2), lane@1 (n3) + lane@1:1 (n4)
MULTI = u.unit_set(u.lane("lane@", gpus=2, nodes=2, replicas=2, kill_signal=signal.SIGINT))
PLAN = u.plan(MULTI, count=4, gpus=2)


def _all(state: S) -> dict[str, InstanceRecord]:
    return {p.instance: InstanceRecord(state=state) for p in PLAN.instances}


def test_the_plan_has_two_replicas_of_two_ranks() -> None:
    ranks = {p.instance: (p.node, p.rank, p.nnodes) for p in PLAN.instances}
    assert ranks == {
        "lane@0": ("n1", 0, 2),
        "lane@0:1": ("n2", 1, 2),
        "lane@1": ("n3", 0, 2),
        "lane@1:1": ("n4", 1, 2),
    }


def test_a_restarting_rank_makes_its_running_peers_restart_with_their_kill_signal() -> None:
    decisions = take_down_peers(MULTI, PLAN, _all(S.READY), "lane@0:1", S.RESTARTING)
    assert decisions == [SignalOn(Host("n1", agent=True), ("lane@0",), signal.SIGINT)]


def test_a_rank_failed_for_good_stops_its_peers() -> None:
    decisions = take_down_peers(MULTI, PLAN, _all(S.STARTING), "lane@1", S.FAILED)
    assert decisions == [StopOn(Host("n4", agent=True), ("lane@1:1",))]


@pytest.mark.parametrize("peer", [S.INACTIVE, S.WAITING, S.RESTARTING, S.STOPPING, S.EXITED])
def test_peers_that_are_not_running_are_left_alone(peer: S) -> None:
    records = {**_all(S.READY), "lane@0": InstanceRecord(state=peer)}
    assert take_down_peers(MULTI, PLAN, records, "lane@0:1", S.RESTARTING) == []


@pytest.mark.parametrize("to", [S.READY, S.STARTING, S.STOPPING, S.EXITED])
def test_other_transitions_take_nothing_down(to: S) -> None:
    assert take_down_peers(MULTI, PLAN, _all(S.READY), "lane@0", to) == []


def test_single_node_replicas_have_no_peers() -> None:
    single = u.unit_set(u.lane("lane@", replicas=2))
    plan = u.plan(single)
    records = {p.instance: InstanceRecord(state=S.READY) for p in plan.instances}
    assert take_down_peers(single, plan, records, "lane@0", S.FAILED) == []
