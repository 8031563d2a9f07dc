"""Which lane gets a request: least outstanding among lanes with room, round robin on ties.

:func:`choose` states the policy as one pass over a name's lanes. Ejected lanes
(:mod:`._ejection`) are passed over, unless every untried lane is ejected: then the
choice is made as if none were (the panic rule).

That pass costs time per lane, per request: at a thousand lanes, more than the rest of
a proxied request. So the endpoint
chooses through :class:`Admission`, an index of the lanes that gives the same lane as
:func:`choose` for the same state at a cost that does not grow with the number of
lanes: each name's lanes in buckets by outstanding count, each bucket in the table's
order. The first bucket under the limit is the fewest; the ``turn``-th lane of it, the
tried ones skipped, is the one the pass picks. Lanes without room for another reason
stay out of the buckets until that reason ends: an ejected lane until its ejection does,
a lane whose fresh sample says its queue is full until that sample is stale or replaced.

The index learns of changes instead of looking: counts and ejections from every worker
through the shared table's journals (:meth:`SharedCounts.changes`), samples through the
lane table (:attr:`LaneTable.sampled`), the set of lanes through its
:attr:`LaneTable.generation`, ends of ejections and of fresh samples from two heaps by
time. It re-reads everything when it may have missed something (a journal overrun, the
lanes changed, another limit) and once a second, which bounds to a second any error
from a journal entry read before the change it records (:mod:`._shared_counts` says
when that can happen). With several workers the index sees each lane's total as of the
moment it read the journal at the start of the choice, and may miss the change another
worker makes at that very moment: the bound the pass had, ``workers - 1``.
A name with at most :data:`WALK_UP_TO` lanes is walked: a short pass costs less than
reading the journals.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, insort
from collections.abc import Collection, Sequence
from operator import attrgetter

from ddsup.endpoint._lanes import SAMPLED_MAX, LaneState, LaneTable

WALK_UP_TO = 16  # lanes of a name; at most this many, the pass is cheaper
RESYNC_EVERY = 1.0  # seconds: the index re-reads every lane at least this often
EJECTED = -1  # LaneState.level of a lane out of the buckets: ejected ...
FULL = -2  # ... or a fresh sample of its queue says it has no room
UNPLACED = -3  # ... or not placed yet

_order = attrgetter("order")


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


class _Buckets:
    """One name's lanes with room for a reason other than their count, by that count."""

    __slots__ = ("by_instance", "ejected", "lanes", "levels", "members")

    def __init__(self, lanes: Sequence[LaneState]) -> None:
        self.lanes = lanes
        self.by_instance = {lane.info.instance: lane for lane in lanes}
        self.members: dict[int, list[LaneState]] = {}  # count → lanes, in the table's order
        self.ejected = 0  # lanes of the name at EJECTED
        for lane in lanes:  # in order already
            if lane.level >= 0:
                self.members.setdefault(lane.level, []).append(lane)
            elif lane.level == EJECTED:
                self.ejected += 1
        self.levels = sorted(self.members)  # the counts that have lanes

    def move(self, lane: LaneState, old: int, new: int) -> None:
        if old >= 0:
            bucket = self.members[old]
            del bucket[bisect_left(bucket, lane.order, key=_order)]
            if not bucket:
                del self.members[old]
                del self.levels[bisect_left(self.levels, old)]
        elif old == EJECTED:
            self.ejected -= 1
        if new >= 0:
            bucket = self.members.setdefault(new, [])
            if not bucket:
                insort(self.levels, new)
            insort(bucket, lane, key=_order)
        elif new == EJECTED:
            self.ejected += 1

    def pick(self, tried: Collection[str], limit: int, turn: int) -> LaneState | None:
        """The pass's choice among the lanes in buckets (see the module docstring)."""
        for level in self.levels:
            if level >= limit:
                return None
            bucket = self.members[level]
            if not tried:
                return bucket[turn % len(bucket)]
            skip = sorted(
                bisect_left(bucket, lane.order, key=_order)
                for name in tried
                if (lane := self.by_instance.get(name)) is not None and lane.level == level
            )
            untried = len(bucket) - len(skip)
            if untried:
                at = turn % untried
                for position in skip:  # the at-th untried lane
                    if position > at:
                        break
                    at += 1
                return bucket[at]
        return None

    def all_ejected(self, tried: Collection[str]) -> bool:
        """Whether every untried lane is ejected (and there is one): the panic rule."""
        tried_lanes = [lane for name in tried if (lane := self.by_instance.get(name))]
        ejected = self.ejected - sum(1 for lane in tried_lanes if lane.level == EJECTED)
        untried = len(self.lanes) - len(tried_lanes)
        return untried > 0 and ejected == untried


class Admission:
    """The choice over one :class:`LaneTable` (see the module docstring); one per process."""

    def __init__(self, table: LaneTable) -> None:
        self.table = table
        self._generation = -1  # the table's generation the index is of; -1: none yet
        self._buckets: dict[str, _Buckets] = {}  # built when a name is first asked for
        self._seen: list[int] = []  # each journal's count of changes read
        self._limit = -1
        self._stale_after = math.nan
        self._now = -math.inf  # the latest time the index was brought to
        self._now_us = -math.inf
        self._synced = -math.inf  # when it last re-read everything
        self._pushed = 0  # a tie-breaker for the heaps
        self._ejected: list[tuple[int, int, LaneState]] = []  # (ejected_until, _, lane)
        self._full: list[tuple[float, int, LaneState]] = []  # (sampled_at, _, lane)
        self._keys: dict[LaneState, float] = {}  # the last key each lane out was pushed with

    def choose(
        self,
        name: str,
        tried: Collection[str],
        *,
        limit: int,
        now: float,
        stale_after: float,
        turn: int,
    ) -> LaneState | None:
        """:func:`choose` over the lanes of ``name``, the same lane, through the index."""
        lanes = self.table.ready(name)
        if len(lanes) <= WALK_UP_TO:  # :func:`choose`, one call less: this runs per request
            lane, all_ejected = _choose(lanes, tried, limit, now, stale_after, turn, now * 1e6)
            if lane is None and all_ejected:
                lane, _ = _choose(lanes, tried, limit, now, stale_after, turn, math.inf)
            return lane
        self._catch_up(limit, now, stale_after)
        buckets = self._buckets.get(name)
        if buckets is None:
            buckets = self._buckets[name] = _Buckets(lanes)
        lane = buckets.pick(tried, limit, turn)
        if lane is None and buckets.all_ejected(tried):  # the panic rule: a pass, while it lasts
            return choose(lanes, tried, limit=limit, now=now, stale_after=stale_after, turn=turn)
        return lane

    def _catch_up(self, limit: int, now: float, stale_after: float) -> None:
        """Bring the index to ``now``: the changes since the last call, then the ends."""
        table = self.table
        if (
            table.generation != self._generation
            or limit != self._limit
            or stale_after != self._stale_after
            or not self._now <= now < self._synced + RESYNC_EVERY
        ):
            self._resync(limit, now, stale_after)
            return
        self._now, self._now_us = now, now * 1e6
        slots = table.counts.changes(self._seen)
        sampled = table.sampled
        if slots is None or len(sampled) >= SAMPLED_MAX:
            self._resync(limit, now, stale_after)  # some changes were lost
            return
        state_at = table.state_at
        for slot in slots:
            if (lane := state_at(slot)) is not None:
                self._place(lane, False)
        for lane in sampled:
            if state_at(lane.slot) is lane:
                self._place(lane, False)
        sampled.clear()
        self._expire(now, stale_after)

    def _expire(self, now: float, stale_after: float) -> None:
        """Ejections that ended and full queues whose sample went stale by ``now``."""
        ejected, full, now_us = self._ejected, self._full, self._now_us
        while ejected and ejected[0][0] <= now_us:
            lane = heapq.heappop(ejected)[2]
            if lane.level == EJECTED and self.table.state_at(lane.slot) is lane:
                self._place(lane, True)
        while full and now - full[0][0] > stale_after:
            lane = heapq.heappop(full)[2]
            if lane.level == FULL and self.table.state_at(lane.slot) is lane:
                self._place(lane, True)

    def _place(self, lane: LaneState, popped: bool) -> None:
        """Put ``lane`` where its state says (``popped``: its heap entry was just taken)."""
        old = lane.level
        if lane.ejected_until > self._now_us:
            new = EJECTED
        else:
            waiting = lane.waiting
            if (
                waiting is not None
                and waiting >= self._limit
                and self._now - lane.sampled_at <= self._stale_after
            ):
                new = FULL
            else:
                new = lane.outstanding
        if new != old:
            lane.level = new
            for name in lane.names:
                if (buckets := self._buckets.get(name)) is not None:
                    buckets.move(lane, old, new)
        if new < 0:
            key = lane.ejected_until if new == EJECTED else lane.sampled_at
            if popped or new != old or self._keys.get(lane) != key:  # else it is in the heap
                self._keys[lane] = key
                self._pushed += 1
                if new == EJECTED:
                    heapq.heappush(self._ejected, (lane.ejected_until, self._pushed, lane))
                else:
                    heapq.heappush(self._full, (lane.sampled_at, self._pushed, lane))

    def _resync(self, limit: int, now: float, stale_after: float) -> None:
        """Re-read every lane: the lanes changed, or the index may have missed a change."""
        table = self.table
        self._generation = table.generation
        self._limit, self._stale_after = limit, stale_after
        self._now, self._now_us, self._synced = now, now * 1e6, now
        self._seen = table.counts.heads()  # before the counts: a change after is journaled
        table.sampled.clear()
        self._buckets = {}
        self._ejected, self._full, self._keys = [], [], {}
        for order, lane in enumerate(table.states()):
            lane.order = order
            lane.level = UNPLACED
            self._place(lane, False)
