"""Which lane gets a request: least outstanding among lanes with room, round robin on ties.

Pure functions over :class:`LaneState` values, apart from I/O, so the policy is tested
without sockets and the hot path stays a single pass over a model's lanes.
"""

from __future__ import annotations

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
    fewest = -1
    ties: list[LaneState] = []
    for lane in lanes:
        if tried and lane.info.instance in tried:
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
        return None
    return ties[turn % len(ties)]
