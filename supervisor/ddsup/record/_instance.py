"""What the events say about one instance now: the fold of its events into one record.

The live run (``ddsup.decide._run_state``) keeps one :class:`InstanceRecord` per instance
as events arrive; ``ddsup status`` of a finished run replays ``events.jsonl`` through the
same :meth:`InstanceRecord.apply`, so a live answer and a replay cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ddsup._exit import ExitStatus
from ddsup.record._events import (
    LivenessFailed,
    ProbeAnswered,
    ProcessStarted,
    RecordedEvent,
    UnitTransition,
)
from ddsup.record._states import InstanceState


@dataclass(frozen=True)
class InstanceRecord:
    """An instance as of its latest event.

    ``pid`` is its live process (from the latest transition, or the ``process`` event that
    followed a ``starting``); ``last_exit`` the latest exit any transition recorded;
    ``probe`` and ``readiness_timeout`` those of the latest transition; ``probe_answer``
    the probe's latest answer in the current start (``probe`` events); ``attempt`` and
    ``attempt_limit`` those of the latest start; ``ready_seconds`` the time from its
    latest ``starting`` to the ``ready`` that followed; ``liveness_failures`` the
    liveness probes it failed in a row while ``unresponsive`` (of ``liveness_limit``; 0
    in any other state).
    """

    state: InstanceState = InstanceState.INACTIVE
    since: float | None = None
    pid: int | None = None
    restarts: int = 0
    last_exit: ExitStatus | None = None
    reason: str | None = None
    probe: str | None = None
    readiness_timeout: bool = False
    started_at: float | None = None
    ready_seconds: float | None = None
    probe_answer: str | None = None
    attempt: int | None = None
    attempt_limit: int | None = None
    liveness_failures: int = 0
    liveness_limit: int = 0
    until: float | None = None  # waiting: when its stagger turn comes

    def apply(self, event: RecordedEvent) -> InstanceRecord:
        """The record after ``event`` (events of other kinds leave it as it is)."""
        if isinstance(event, ProcessStarted):
            return replace(self, pid=event.pid)
        if isinstance(event, ProbeAnswered):
            return replace(self, probe_answer=event.answer)
        if isinstance(event, LivenessFailed):
            return replace(
                self,
                probe=event.probe,
                liveness_failures=event.failures,
                liveness_limit=event.limit,
            )
        if not isinstance(event, UnitTransition):
            return self
        starting = event.to_state is InstanceState.STARTING
        started_at = event.time if starting else self.started_at
        ready_seconds = self.ready_seconds
        unresponsive = event.to_state is InstanceState.UNRESPONSIVE
        if event.to_state is InstanceState.READY and started_at is not None:
            ready_seconds = round(event.time - started_at, 3)
        return InstanceRecord(
            state=event.to_state,
            since=event.time,
            pid=event.pid,
            restarts=event.restarts,
            last_exit=event.exit or self.last_exit,
            reason=event.reason,
            probe=event.probe,
            readiness_timeout=event.readiness_timeout,
            started_at=started_at,
            ready_seconds=ready_seconds,
            probe_answer=event.probe or (None if starting else self.probe_answer),
            attempt=event.attempt if event.attempt is not None else self.attempt,
            attempt_limit=event.attempt_limit or self.attempt_limit,
            liveness_failures=self.liveness_failures if unresponsive else 0,
            liveness_limit=self.liveness_limit if unresponsive else 0,
            until=event.until,
        )

    @property
    def probe_verdict(self) -> str | None:
        """``status``'s PROBE: ``ok``, ``none`` (no probe), ``timed out (…)``; while starting
        the probe's latest answer (``HTTP 503``, ``Connection refused``) or ``pending``."""
        if self.state is InstanceState.READY:
            return "ok" if self.probe is not None else "none"
        if self.state is InstanceState.STARTING:
            return self.probe_answer or "pending"
        if self.state is InstanceState.UNRESPONSIVE:
            return f"failing {self.liveness_failures}/{self.liveness_limit} ({self.probe})"
        if self.readiness_timeout:
            return f"timed out ({self.probe})" if self.probe else "timed out"
        return None


def fold(events: list[RecordedEvent]) -> dict[str, InstanceRecord]:
    """Every instance's record after ``events`` (oldest first)."""
    records: dict[str, InstanceRecord] = {}
    for event in events:
        if isinstance(event, UnitTransition | ProcessStarted | ProbeAnswered | LivenessFailed):
            records[event.instance] = records.get(event.instance, InstanceRecord()).apply(event)
    return records
