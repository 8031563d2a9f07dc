"""Which lane gets a request: least outstanding among lanes with room, round robin on ties.

Pure functions over :class:`LaneState` values, apart from I/O, so the policy is tested
without sockets and the hot path stays a single pass over a name's lanes. Ejected lanes
(:mod:`._ejection`) are passed over, unless every untried lane is ejected: then the
choice is made as if none were (the panic rule).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence

from ddsup.endpoint._lanes import LaneState


def choose(
    lanes: Sequence[LaneState],
    tried: Collection[str],
    *,
    limit: int,
    now: float,
    stale_after: float,
    turn: int,
) -> LaneState | None:
    """The untried lane with room and the fewest outstanding requests, or ``None``.

    A lane has room while its queue (see :meth:`LaneState.queue`) is under ``limit``;
    ``turn`` picks among lanes tied on the fewest, so equal lanes share the load.
    """
    lane, all_ejected = _choose(lanes, tried, limit, now, stale_after, turn, now * 1e6)
    if lane is None and all_ejected:
        lane, _ = _choose(lanes, tried, limit, now, stale_after, turn, math.inf)  # none is out
    return lane


def _choose(
    lanes: Sequence[LaneState],
    tried: Collection[str],
    limit: int,
    now: float,
    stale_after: float,
    turn: int,
    now_us: float,
) -> tuple[LaneState | None, bool]:
    """(the choice, whether every untried lane was passed over as ejected)."""
    fewest = -1
    ties: list[LaneState] = []
    ejected = untried = 0
    for lane in lanes:
        if tried and lane.info.instance in tried:
            continue
        untried += 1
        if lane.ejected_until > now_us:
            ejected += 1
            continue
        outstanding = lane.outstanding
        queue = outstanding
        waiting = lane.waiting  # LaneState.queue, inlined: this loop runs per request
        if waiting is not None and waiting > queue and now - lane.sampled_at <= stale_after:
            queue = waiting
        if queue >= limit:
            continue
        if fewest < 0 or outstanding < fewest:
            fewest = outstanding
            ties = [lane]
        elif outstanding == fewest:
            ties.append(lane)
    if not ties:
        return None, untried > 0 and ejected == untried
    return ties[turn % len(ties)], False
