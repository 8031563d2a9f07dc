"""Liveness: a ready lane keeps answering its probe, or it leaves the rotation and restarts.

Readiness asks once "has it loaded yet?"; liveness keeps asking "is it still answering?"
for as long as the lane is ready. A lane that hangs (SIGSTOP, a stuck CUDA kernel, a
deadlocked API server) keeps its port open: connections are still accepted, requests
routed to it never come back, and under least-outstanding choice nothing else moves
traffic away from it. So:

- every ``liveness_interval`` the lane's own ``[ready]`` probe runs once, and must pass
  within that interval (a probe still unanswered when the next one is due has failed);
- the first failure takes the lane out of the endpoint's rotation (``ready`` →
  ``unresponsive``), and a later pass puts it back (``unresponsive`` → ``ready``);
- ``liveness_failures`` failures in a row end it: a process that does not answer is not
  asked to stop, its process group is SIGKILLed at once, and its restart policy decides
  what follows (the verdict names the liveness probe as the reason).

Only lanes are probed this way (``[ready] liveness_failures = 0`` turns it off): the
endpoint's own ``/health`` answers 503 while a model has no ready lane, which is news
about the lanes, not about the endpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import trio

from ddsup.service._readiness import Probe
from ddsup.units import Unit, UnitType


@dataclass(frozen=True)
class Liveness:
    """How a ready lane is watched: one probe every ``interval``, ``limit`` misses in a row."""

    interval: float
    limit: int

    @classmethod
    def of(cls, unit: Unit) -> Liveness | None:
        """The unit's liveness policy; None when it is not watched (not a lane, no probe)."""
        ready = unit.ready
        if unit.type is not UnitType.LANE or ready is None or ready.liveness_failures < 1:
            return None
        return cls(ready.liveness_interval, ready.liveness_failures)


async def watch_liveness(
    probe: Probe,
    liveness: Liveness,
    *,
    failed: Callable[[int, str], None],
    passed: Callable[[], None],
) -> str:
    """Probe on the schedule until ``limit`` probes in a row failed; their last answer.

    ``failed(n, answer)`` is called for the n-th failure in a row, ``passed()`` for the
    first pass after failures. Probes start every ``interval`` (start to start), so one
    that times out is followed by the next at once: a lane that stops answering fails
    ``limit`` probes within ``limit`` intervals of the first it left unanswered.
    """
    failures = 0
    due = trio.current_time()
    while True:
        due += liveness.interval
        await trio.sleep_until(due)
        if await probe.check(liveness.interval):
            if failures:
                failures = 0
                passed()
            continue
        failures += 1
        failed(failures, probe.last_result)
        if failures >= liveness.limit:
            return probe.last_result
