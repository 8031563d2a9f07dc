"""Requests that wait in the endpoint for a lane with a free slot (late binding).

Without a bound, the endpoint sends every request to a lane when it arrives, and a lane
that has more than it runs at once (vLLM's ``--max-num-seqs``) queues the rest itself.
A request queued inside one vLLM can no longer move: when another lane runs dry, it sits
idle while that queue drains, and prefix routing, which sends a template's requests to
the lane that holds it, makes such queues deeper. With ``max_in_flight_per_lane``, a lane
is sent at most that many requests at once; the rest wait here, in the order they came,
and a lane that frees a slot takes one of them then, when it can run it. So no lane idles
while a request waits, and the choice of which request a lane takes is made when it has
room. Under least-load it takes the oldest; under prefix routing, among the
:data:`WINDOW` oldest, the oldest whose prompt it was sent first
(:meth:`~._prefix_routing.PrefixRouter.match`), else the oldest it holds a copy of, else
the oldest that no lane holds, else the oldest, but that one only when the lane is about
to run dry (one request in flight, or none) or the lane that holds it is unbalanced
against this one by the prefix thresholds. A lane's engine runs its batch either way,
and a template computed on a second lane for a slot it could wait with costs more than
its own prefill: it pushes that lane's own templates out of its cache, to be computed
again (BENCHMARKS.md, prefix routing).

A request's match is looked up once some lane holds its prompt, and kept while that
lane may serve it: the first lane sent a block stays its first, and a lane's choice then
costs a comparison per waiting request. A lane sent a copy since (the index counts
copies) is looked up again before it passes the request over.

A slot is handed over by counting the request in flight on the lane
(:meth:`LaneState.begin`) before its task runs again, so no other request takes it
meanwhile; a request that leaves first (its client hung up, its wait ran past
``upstream_timeout``, the endpoint stops) gives the slot back to the next one.

Each worker keeps its own waiting requests. A worker hands a slot over at once when one
of its own requests on that lane ends; slots that free otherwise (another worker's
request ended, a lane joined, an ejection or a full queue's sample ended) are found by
a check every :data:`TICK` while requests wait, which also ends the waits of a name
whose lanes all left the rotation. Two workers can both see the same free slot and both
send to it: a lane may then have up to ``workers - 1`` over its bound, as admission's
counts allow (:mod:`._admission`).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence

import trio

from ddsup.endpoint._admission import Admission
from ddsup.endpoint._connection import Hangup
from ddsup.endpoint._deadlines import Deadlines, Expired, Timed
from ddsup.endpoint._lanes import LaneState, LaneTable
from ddsup.endpoint._prefix_routing import Choice, PrefixRouter

TICK = 0.01  # seconds between looks for slots that freed in another worker, while any wait
WINDOW = 32  # waiting requests a lane with a free slot chooses among (the oldest ones)


class NoLane(Exception):
    """The name a request waits for has no lane in the rotation any more."""


class Waiting(Timed):
    """One request waiting for a slot: its hang-up and its deadline end the wait early."""

    __slots__ = ("choice", "copies", "done", "held", "keys", "lane", "tried")

    def __init__(self, keys: Sequence[int], tried: Sequence[str], deadline: float) -> None:
        super().__init__()
        self.keys = keys
        self.tried = tried
        self.deadline = deadline
        self.done = trio.Event()
        self.lane: LaneState | None = None  # the lane it was given a slot of
        self.choice: str | None = None  # why that lane, under prefix routing
        # the lanes that hold the most of its prompt, first-sent first, once some do
        # (PrefixRouter.match); kept, as the first lane sent a block stays first
        self.held: tuple[LaneState, ...] = ()
        self.copies = -1  # the index's count of copies when ``held`` was matched

    def interrupt(self, error: Exception) -> None:
        if not self.done.is_set():
            self.interrupted = error
            self.done.set()

    def expire(self) -> None:
        self.interrupt(Expired())


class LaneSlots:
    """The requests one worker holds until a lane has room (see the module docstring)."""

    def __init__(
        self,
        table: LaneTable,
        admission: Admission,
        deadlines: Deadlines,
        prefixes: PrefixRouter | None,
        *,
        limit: int,
        stale_after: float,
    ) -> None:
        self.table = table
        self.admission = admission
        self.deadlines = deadlines
        self.prefixes = prefixes
        self.limit = limit  # a lane has a free slot while its queue is under this
        self.stale_after = stale_after
        self.waiting: dict[str, list[Waiting]] = {}  # by name, oldest first; never empty
        self._names: set[str] = set()  # every name a request waited for: its gauge stays
        self._waited = trio.Event()  # a request began to wait since the checks stopped

    def counts(self) -> list[tuple[str, int]]:
        """Requests waiting now, by name (every name a request ever waited for)."""
        return [(name, len(self.waiting.get(name, ()))) for name in self._names]

    async def wait(
        self, name: str, keys: Sequence[int], tried: Sequence[str], hangup: Hangup, deadline: float
    ) -> tuple[LaneState, str | None]:
        """Wait for a slot of a lane of ``name`` that is not in ``tried``: that lane, already
        counted in flight for the caller, and why it was chosen (prefix routing's
        :class:`~._prefix_routing.Choice`; ``None`` under least-load).

        Raises :class:`Expired` at ``deadline``, :class:`~._connection.ClientGone` when
        the client hangs up, and :class:`NoLane` when every lane of ``name`` left.
        """
        waiting = Waiting(keys, tried, deadline)
        self.waiting.setdefault(name, []).append(waiting)
        self._names.add(name)
        self._waited.set()
        self.deadlines.add(waiting)
        hangup.serving = waiting
        if hangup.gone:
            hangup.hung_up()
        try:
            self.dispatch(name, time.monotonic())  # a slot may be free: then the best waiting
            await waiting.done.wait()
        except BaseException:
            self._give_up(name, waiting)
            raise
        finally:
            if hangup.serving is waiting:
                hangup.serving = None
            self.deadlines.discard(waiting)
        if waiting.interrupted is not None:
            self._give_up(name, waiting)
            waiting.raise_interruption()
        lane = waiting.lane
        assert lane is not None
        return lane, waiting.choice

    def _give_up(self, name: str, waiting: Waiting) -> None:
        """``waiting`` leaves: out of the queue, and its slot, if it had one, to the next."""
        queue = self.waiting.get(name)
        if queue is not None and waiting in queue:
            queue.remove(waiting)
            if not queue:
                del self.waiting[name]
        lane, waiting.lane = waiting.lane, None
        if lane is not None:
            lane.end()
            self.freed(lane)

    def freed(self, lane: LaneState) -> None:
        """A request of this worker on ``lane`` ended: its slot goes to one that waits."""
        now = time.monotonic()
        for name in lane.names:
            if name in self.waiting:
                self.dispatch(name, now)

    def dispatch(self, name: str, now: float) -> None:
        """Hand every free slot of ``name``'s lanes to a request that waits for one."""
        queue = self.waiting.get(name)
        if queue and not self.table.ready(name):
            for waiting in queue:
                waiting.interrupt(NoLane(name))
            return
        skip: list[str] = []  # lanes with a free slot that no waiting request may use
        while queue:
            lane = self.admission.choose(
                name,
                skip,
                limit=self.limit,
                now=now,
                stale_after=self.stale_after,
                turn=self.table.next_turn(name),
            )
            if lane is None:
                break
            at, choice = self._pick(lane, name, queue, now)
            if at < 0:
                skip.append(lane.info.instance)
                continue
            waiting = queue.pop(at)
            lane.begin()
            if waiting.keys and self.prefixes is not None:
                self.prefixes.index.record(waiting.keys, lane, now)
            waiting.lane, waiting.choice = lane, choice
            waiting.done.set()
        if not queue:
            self.waiting.pop(name, None)

    def _pick(
        self, lane: LaneState, name: str, queue: list[Waiting], now: float
    ) -> tuple[int, str | None]:
        """Which waiting request ``lane`` takes (its place in ``queue``; -1: none may), and
        why (see the module docstring)."""
        instance = lane.info.instance
        prefixes = self.prefixes
        state_at = self.table.state_at
        now_us = now * 1e6
        dry = lane.outstanding <= 1  # about to run dry: any waiting request will do
        best, best_rank, best_choice = -1, -1, None
        for at, waiting in enumerate(itertools.islice(queue, WINDOW)):
            if instance in waiting.tried or waiting.interrupted is not None:
                continue  # tried there already, or it leaves (hung up, timed out)
            if prefixes is None:
                return at, None
            held = waiting.held
            if held:  # kept while its first lane may still serve it
                first = held[0]
                if state_at(first.slot) is not first or first.ejected_until > now_us:
                    held = ()
            if not held and waiting.keys:
                held = self._match(name, waiting, now)
            if held and lane not in held and waiting.copies != prefixes.index.copies:
                held = self._match(name, waiting, now)  # the lane may hold a copy since
            if not held:
                rank, choice = 1, Choice.NO_MATCH  # no lane holds it: anywhere
            elif held[0] is lane:
                rank, choice = 3, Choice.PREFIX  # the lane sent it first
            elif lane in held:
                rank, choice = 2, Choice.PREFIX  # a copy
            elif dry or prefixes.policy.outweighs(held[0].outstanding, lane.outstanding):
                rank, choice = 0, Choice.FREE_SLOT
            else:
                continue  # the slot waits for a prompt the lane holds, or a new one
            if rank > best_rank:
                best, best_rank, best_choice = at, rank, choice
                if rank == 3:
                    break
        return best, best_choice

    def _match(self, name: str, waiting: Waiting, now: float) -> tuple[LaneState, ...]:
        """The lanes that hold ``waiting``'s prompt, looked up now and kept."""
        assert self.prefixes is not None
        waiting.copies = self.prefixes.index.copies
        waiting.held = self.prefixes.match(name, waiting.keys, now)
        return waiting.held

    async def run(self) -> None:
        """Look for free slots every :data:`TICK` while requests wait, until cancelled."""
        while True:
            await self._waited.wait()
            self._waited = trio.Event()
            while self.waiting:
                await trio.sleep(TICK)
                now = time.monotonic()
                for name in list(self.waiting):
                    self.dispatch(name, now)
