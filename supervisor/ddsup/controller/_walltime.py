"""The job's end: ``status`` shows the time left, and ``stop_before_end`` stops units ahead.

At its time limit Slurm signals every process of the job at once and SIGKILLs them
``KillWait`` later: a worker in the middle of a batch loses it, and nothing stops in
order. A unit with ``[unit] stop_before_end = "10m"`` is stopped gracefully (its
``kill_signal``, ``timeout_stop``) ten minutes before the job's end time instead; for the
worker that ends the run with the worker's own exit status (or a requeue, when it exits
with :data:`~ddsup._errors.EXIT_REQUEUE`), after the ordered stop of everything else.

The end time is Slurm's (``_own_job``), asked again before each stop, so a time limit
that was extended meanwhile moves the stop with it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import trio

from ddsup.controller._own_job import REFRESH, job_end_time
from ddsup.decide import EndNear, Input
from ddsup.units import UnitSet, format_duration


@dataclass(frozen=True)
class EarlyStop:
    """Stop ``unit`` ``before`` seconds ahead of the job's end."""

    unit: str
    before: float


def early_stops(units: UnitSet) -> list[EarlyStop]:
    return [EarlyStop(u.name, u.stop_before_end) for u in units.units if u.stop_before_end]


class JobEnd:
    """The job's end time as last asked (``at``), kept current by :meth:`watch`."""

    def __init__(self, job_id: str | None) -> None:
        self.job_id = job_id  # None: not a Slurm job, no end to watch
        self.at: float | None = None

    async def watch(self, stops: list[EarlyStop], feed: Callable[[Input], None]) -> None:
        """Keep ``at`` current and feed :class:`EndNear` when a stop is due."""
        if self.job_id is None:
            return
        done: set[str] = set()
        while True:
            end = self.at = await job_end_time(self.job_id)
            pending = [s for s in stops if s.unit not in done]
            if end is None or not pending:
                await trio.sleep(REFRESH)  # no event exists for a changed time limit: bounded poll
                continue
            now = time.time()
            for stop in [s for s in pending if now >= end - s.before]:
                done.add(stop.unit)
                when = time.strftime("%H:%M:%S", time.localtime(end))
                reason = f"stop_before_end = {format_duration(stop.before)}: the job ends at {when}"
                feed(EndNear(stop.unit, reason))
            pending = [s for s in pending if s.unit not in done]
            if pending:
                wait = min(end - s.before for s in pending) - now
                await trio.sleep(min(max(wait, 0.0), REFRESH))  # then asked again: still due?
