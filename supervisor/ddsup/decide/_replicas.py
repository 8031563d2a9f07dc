"""The replica policy: a multi-node replica lives and dies as one.

torch.distributed cannot go on with a rank missing, so a replica that spans nodes is
restarted, or given up, as a whole:

- **Any rank's end ends them all.** A rank whose process ends (any exit, 0 included, or
  rank 0's readiness timeout) is held by its service in ``restarting``; the run takes
  every other rank down (``TakeDownOn``: kill signal, ``timeout_stop``, SIGKILL) and
  holds it too.
- **One restart, counted once.** When every rank is held, the replica has ended one
  start: it is counted once against its unit's start limit (``RestartPolicy``: attempts
  in a row that never became ready, or starts within ``start_limit_interval``). Past it,
  the replica has failed for good: its ranks fail, and with ``on_failure = "stop-all"``
  the run ends 70, or 75 when readiness timeouts did it. Otherwise, after the backoff,
  rank 0 starts again (on its planned ``master_port`` if that is free, else on one its
  node picks) and, once it has, the other ranks follow with the same port: the same GPUs
  and ports, a fresh rendezvous.
- With ``restart = "no"`` a rank's exit fails it (``Service``); its peers are stopped.

The run's state calls :meth:`ReplicaPolicy.observe` for every transition while it is not
stopping. Time is the events' own (``UnitTransition.time``).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ddsup.decide._run_inputs import Decision, FailOn, Host, ResumeOn, StopOn, TakeDownOn
from ddsup.plan import Plan, PlannedInstance
from ddsup.record import InstanceRecord, InstanceState, UnitFailure, UnitTransition
from ddsup.service import REPLICA_RESTARTS, RestartPolicy
from ddsup.units import UnitSet


class _Phase(enum.Enum):
    UP = "up"  # its ranks run (or start)
    DOWN = "down"  # taking the ranks down: waiting until every one is held
    RESUMING = "resuming"  # rank 0 told to start again; the others follow once it has
    ENDED = "ended"  # failed for good, or a rank's exit was final


@dataclass
class _Replica:
    """One multi-node replica: its ranks, and where it is in going down and coming back as one."""

    ranks: tuple[PlannedInstance, ...]  # rank 0 first
    policy: RestartPolicy
    phase: _Phase = _Phase.UP
    counted: bool = False  # its first start has been counted
    cause: UnitTransition | None = None  # the rank that went down first, this time
    waiting: set[str] = field(default_factory=set)  # ranks not held yet
    resuming: set[str] = field(default_factory=set)  # told to start, not seen starting
    ready_since: float | None = None

    @property
    def head(self) -> PlannedInstance:
        return self.ranks[0]


@dataclass(frozen=True)
class Verdict:
    """What one transition means for its replica: decisions, and a failure for good."""

    decisions: list[Decision] = field(default_factory=list)
    failure: UnitFailure | None = None


class ReplicaPolicy:
    """Every multi-node replica of a run, and what their ranks' transitions mean."""

    def __init__(self, units: UnitSet, plan: Plan) -> None:
        grouped: dict[str, list[PlannedInstance]] = {}
        for planned in plan.instances:
            if planned.nnodes > 1:
                grouped.setdefault(planned.replica_name, []).append(planned)
        self._replicas = {
            name: _Replica(
                tuple(sorted(ranks, key=lambda p: p.rank or 0)),
                RestartPolicy(units.by_name(ranks[0].unit).service),
            )
            for name, ranks in grouped.items()
        }

    def replica_of(self, instance: str) -> tuple[str, ...]:
        """Every rank of ``instance``'s replica (itself alone for single-node lanes)."""
        replica = self._replicas.get(instance.split(":", 1)[0])
        return (instance,) if replica is None else tuple(r.instance for r in replica.ranks)

    def observe(self, event: UnitTransition, records: Mapping[str, InstanceRecord]) -> Verdict:
        """What ``event`` (a rank's transition) means for its replica."""
        replica = self._replicas.get(event.instance.split(":", 1)[0])
        if replica is None or replica.phase is _Phase.ENDED:
            return Verdict()
        to = event.to_state
        if to.final:
            replica.phase = _Phase.ENDED
            reason = f"{event.instance} ended: {event.reason}"
            others = _live(replica, records, but=event.instance)
            return Verdict([StopOn(host, names, reason) for host, names in _group(others)])
        if to is InstanceState.STARTING:
            return Verdict(self._started(replica, event))
        if to is InstanceState.READY and event.instance == replica.head.instance:
            replica.policy.became_ready()
            replica.ready_since = event.time
        if to is InstanceState.RESTARTING:
            return self._held(replica, event, records)
        return Verdict()

    @staticmethod
    def _started(replica: _Replica, event: UnitTransition) -> list[Decision]:
        replica.resuming.discard(event.instance)
        if event.instance != replica.head.instance:
            return []
        if not replica.counted:  # the replica's first start counts like any other
            replica.counted = True
            replica.policy.admit(event.time)
        if replica.phase is not _Phase.RESUMING:
            return []
        replica.phase = _Phase.UP  # rank 0 has its rendezvous port: the others follow
        followers = replica.ranks[1:]
        replica.resuming.update(p.instance for p in followers)
        attempt, port = replica.policy.attempt, event.master_port
        return [ResumeOn(host, names, 0.0, attempt, port) for host, names in _group(followers)]

    @staticmethod
    def _held(
        replica: _Replica, event: UnitTransition, records: Mapping[str, InstanceRecord]
    ) -> Verdict:
        decisions: list[Decision] = []
        if replica.phase is not _Phase.DOWN:
            replica.phase, replica.cause = _Phase.DOWN, event
            live = _live(replica, records, but=event.instance)
            replica.waiting = {p.instance for p in live}
            why = event.reason.removesuffix(f"; {REPLICA_RESTARTS}")
            reason = f"{event.instance} went down ({why})"
            decisions += [TakeDownOn(host, names, reason) for host, names in _group(live)]
        replica.waiting.discard(event.instance)
        if replica.waiting:
            return Verdict(decisions)
        return _restart_or_fail(replica, event.time, decisions)


def _restart_or_fail(replica: _Replica, now: float, decisions: list[Decision]) -> Verdict:
    """Every rank is held: one restart of the replica, or its failure for good."""
    cause = replica.cause
    assert cause is not None
    refused = replica.policy.admit(now)
    if refused is not None:
        replica.phase = _Phase.ENDED
        why = cause.reason.removesuffix(f"; {REPLICA_RESTARTS}")
        reason = f"start limit hit: {refused}; last: {cause.instance}: {why}"
        timed_out = cause.readiness_timeout
        failure = UnitFailure(replica.head.instance, reason, cause.exit, timed_out)
        decisions += [FailOn(h, names, reason, timed_out) for h, names in _group(replica.ranks)]
        return Verdict(decisions, failure)
    ready_for = 0.0 if replica.ready_since is None else cause.time - replica.ready_since
    delay = replica.policy.delay(ready_for)
    replica.phase, replica.ready_since = _Phase.RESUMING, None
    replica.resuming = {replica.head.instance}
    [(host, names)] = _group(replica.ranks[:1])
    decisions.append(ResumeOn(host, names, delay, replica.policy.attempt))
    return Verdict(decisions)


def _live(
    replica: _Replica, records: Mapping[str, InstanceRecord], *, but: str
) -> list[PlannedInstance]:
    """Ranks other than ``but`` that are neither held nor final (or are about to start)."""
    out = []
    for rank in replica.ranks:
        state = records.get(rank.instance, InstanceRecord()).state
        held = state is InstanceState.RESTARTING and rank.instance not in replica.resuming
        if rank.instance != but and not held and not state.final:
            out.append(rank)
    return out


def _group(ranks: Iterable[PlannedInstance]) -> list[tuple[Host, tuple[str, ...]]]:
    """Ranks by the node whose agent runs them, in rank order."""
    groups: dict[str, list[str]] = {}
    for rank in ranks:
        groups.setdefault(rank.node, []).append(rank.instance)
    return [(Host(node, agent=True), tuple(names)) for node, names in groups.items()]
