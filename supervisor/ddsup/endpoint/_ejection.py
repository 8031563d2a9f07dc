"""Passive ejection: a lane whose requests keep failing leaves the rotation for a while.

Readiness and liveness probes (the service layer) catch a lane that stops answering
them; between probes, and for a lane whose ``/health`` answers while its requests fail,
the endpoint learns from its own requests. Under least-outstanding choice a lane that
fails fast is the least busy one, so without this it would attract ever more traffic,
held back only by ``retries``.

A lane whose requests fail ``eject_after`` times in a row is ejected: no request goes to
it for ``eject_for`` seconds. A failure is a connection refused, failed or timed out, a
reset or silence before the answer, a response head that cannot be used, a response
cut short, or any 5xx answer. A 429 is a lane at capacity, not a failing one: it counts
as a success here (admission deals with it), as does any other answer below 500; a
client hanging up counts as neither. After ``eject_for`` the lane is back on probation:
its first success clears its record, and a failure ejects it again at once, each time
for twice as long, up to ``MAX_BACKOFF`` × ``eject_for``.

Shared by every worker of the endpoint: the streak and the ejection live in shared cells
of the counts table (:mod:`._shared_counts`), so one worker's failures add to the same
streak and a lane one worker ejects is out of all their rotations. Two workers updating
a streak at the same instant may lose one increment; the lane then needs one failure
more. When every ready lane of a name is ejected, ejection is ignored for that name
(:func:`~._admission.choose`), as Envoy's panic threshold does: trying lanes that may
have recovered beats refusing every request, and retries move on from one that has not.

The worker that ejects a lane logs one line and counts it
(``ddsup_endpoint_lane_ejections_total``); ``ddsup_endpoint_lane_ejected`` shows which
lanes are out now, and the process that samples the lanes logs each one's return
(:func:`note_returns`).
"""

from __future__ import annotations

import logging
import time

from ddsup.endpoint._lanes import EJECTED_UNTIL, EJECTIONS, STREAK, LaneState, LaneTable
from ddsup.endpoint._metrics import Metrics

log = logging.getLogger("ddsup.endpoint")

MAX_BACKOFF = 8  # an ejection lasts at most this many times eject_for


class Ejection:
    """The ejection policy of one worker, over the lanes' shared cells."""

    def __init__(self, after: int, cooldown: float, metrics: Metrics) -> None:
        self.after = after
        self.cooldown = cooldown
        self.metrics = metrics

    def succeeded(self, lane: LaneState) -> None:
        """An answer below 500 (or a 429): the lane's record is clean again."""
        counts, slot = lane.counts, lane.slot
        if counts.cell(slot, STREAK):
            counts.set_cell(slot, STREAK, 0)
            counts.set_cell(slot, EJECTIONS, 0)

    def failed(self, lane: LaneState, why: str) -> None:
        """One more failure in a row; eject the lane when that makes ``after`` of them."""
        if not self.after:
            return
        counts, slot = lane.counts, lane.slot
        streak = counts.cell(slot, STREAK) + 1
        counts.set_cell(slot, STREAK, streak)
        now = _now_us()
        if streak < self.after or counts.cell(slot, EJECTED_UNTIL) > now:
            return  # not yet, or out already (requests sent before it was ejected)
        ejections = counts.cell(slot, EJECTIONS) + 1
        counts.set_cell(slot, EJECTIONS, ejections)
        seconds = self.cooldown * min(MAX_BACKOFF, 2 ** (ejections - 1))
        counts.set_cell(slot, EJECTED_UNTIL, now + int(seconds * 1e6))
        self.metrics.ejections[lane.info.instance] += 1
        log.warning(
            "lane %s ejected for %g s: %d failures in a row (last: %s)",
            lane.info.instance,
            seconds,
            streak,
            why,
        )


def is_ejected(lane: LaneState, now: float) -> bool:
    """Whether ``lane`` is out of the rotation at ``now`` (:func:`time.monotonic`)."""
    return lane.ejected_until > now * 1e6


def note_returns(lanes: LaneTable, out: set[int]) -> None:
    """Log each lane that came back since the last call; ``out``: the slots ejected then."""
    now = time.monotonic()
    for state in lanes.states():
        if is_ejected(state, now):
            out.add(state.slot)
        elif state.slot in out:
            out.discard(state.slot)
            log.info("lane %s is back in the rotation (on probation)", state.info.instance)


def _now_us() -> int:
    return int(time.monotonic() * 1e6)
