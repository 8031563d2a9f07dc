"""The lane choice at fleet size: the index gives the pass's lane, at a cost that stays flat.

:class:`Admission` must choose exactly the lane :func:`choose` (the one pass over every
lane that states the policy) chooses, whatever happened before: requests beginning and
ending in this worker and in another one (a second row of the same shared table),
ejections and their ends, queue samples fresh and stale, lanes joining and leaving,
retries. Hypothesis drives random histories and compares the two after every step.
"""

from __future__ import annotations

import collections
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import trio
from endpoint_fakes import FakeLane, http_client, running_endpoint, wait_until
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddsup.endpoint import _admission
from ddsup.endpoint._admission import WALK_UP_TO, Admission, choose
from ddsup.endpoint._lanes import EJECTED_UNTIL, LaneInfo, LaneState, LaneTable
from ddsup.endpoint._shared_counts import SharedCounts

STALE_AFTER = 1.0
COMPLETION = {"model": "m", "prompt": "hi"}


def info(i: int) -> LaneInfo:
    """Lane ``i``: model ``m``; every third one also answers to ``alias``."""
    served = ("alias",) if i % 3 == 0 else ()
    return LaneInfo(f"l{i}", "m", f"http://127.0.0.1:{10000 + i}", served)


@contextmanager
def tables(rows: int, lanes: int) -> Iterator[tuple[LaneTable, SharedCounts]]:
    """A table over ``lanes`` lanes counting in row 0, and another worker's view (row 1)."""
    counts = SharedCounts.private() if rows == 1 else SharedCounts.create(rows, 0)
    table = LaneTable((info(i) for i in range(lanes)), counts=counts)
    other = counts if rows == 1 else SharedCounts(os.dup(counts.fd or -1), rows, rows - 1)
    try:
        yield table, other
    finally:
        if other is not counts:
            other.close()
        counts.close()


class History:
    """One random history, checked against the pass after every step."""

    def __init__(self, table: LaneTable, other: SharedCounts, limit: int) -> None:
        self.table = table
        self.other = other
        self.limit = limit
        self.admission = Admission(table)
        self.now = 100.0
        self.ours: collections.Counter[LaneState] = collections.Counter()
        self.theirs: collections.Counter[int] = collections.Counter()
        self.gone: list[LaneInfo] = []

    def lanes(self) -> list[LaneState]:
        return self.table.states()

    def step(self, data: st.DataObject) -> None:
        lanes = self.lanes()
        action = data.draw(st.sampled_from(ACTIONS))
        lane = data.draw(st.sampled_from(lanes)) if lanes else None
        if action == "begin" and lane is not None:
            lane.begin()
            self.ours[lane] += 1
        elif action == "end" and lane is not None and self.ours[lane]:
            lane.end()
            self.ours[lane] -= 1
        elif action == "theirs" and lane is not None:
            delta = 1 if not self.theirs[lane.slot] else data.draw(st.sampled_from((1, -1)))
            self.other.add(lane.slot, delta)
            self.theirs[lane.slot] += delta
        elif action == "eject" and lane is not None:
            until = int((self.now + data.draw(st.floats(-1, 2))) * 1e6)
            counts = data.draw(st.sampled_from((lane.counts, self.other)))
            counts.set_cell(lane.slot, EJECTED_UNTIL, until)
        elif action == "sample" and lane is not None:
            waiting = data.draw(st.none() | st.integers(0, self.limit + 1))
            lane.record_sample(waiting, self.now - data.draw(st.floats(0, 2 * STALE_AFTER)))
        elif action == "eject all":  # every lane out: the panic rule
            for each in lanes:
                each.counts.set_cell(each.slot, EJECTED_UNTIL, int((self.now + 0.5) * 1e6))
        elif action == "time":
            self.now += data.draw(st.sampled_from((0.0, 1e-6, 0.1, 0.4, STALE_AFTER, -0.2)))
        elif action == "leave" and lane is not None:
            self.table.remove(lane.info.instance)
            self.gone.append(lane.info)
        elif action == "join" and self.gone:
            self.table.add(self.gone.pop(data.draw(st.integers(0, len(self.gone) - 1))))
        self.check(data)

    def check(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(("m", "alias")))
        ready = self.table.ready(name)
        names = [lane.info.instance for lane in ready]
        tried = (
            data.draw(st.lists(st.sampled_from(names), max_size=3, unique=True)) if names else []
        )
        turn = data.draw(st.integers(0, 50))
        want = choose(
            ready, tried, limit=self.limit, now=self.now, stale_after=STALE_AFTER, turn=turn
        )
        got = self.admission.choose(
            name, tried, limit=self.limit, now=self.now, stale_after=STALE_AFTER, turn=turn
        )
        assert got is want, (name, tried, turn)


ACTIONS = (
    *("begin", "begin", "end", "theirs", "eject", "sample", "time", "time", "leave", "join"),
    "eject all",
)


@pytest.mark.parametrize("rows", [1, 2], ids=["1-worker", "2-workers"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_index_chooses_what_the_pass_chooses(rows: int, data: st.DataObject) -> None:
    """With and without the index's safety net (re-reading every lane each second)."""
    lanes = data.draw(st.integers(WALK_UP_TO + 1, WALK_UP_TO + 40))
    limit = data.draw(st.integers(1, 4))
    with tables(rows, lanes) as (table, other), pytest.MonkeyPatch.context() as patch:
        if data.draw(st.booleans()):
            patch.setattr(_admission, "RESYNC_EVERY", math.inf)
        history = History(table, other, limit)
        for _ in range(data.draw(st.integers(1, 120))):
            history.step(data)


@pytest.mark.parametrize("rows", [1, 2], ids=["1-worker", "2-workers"])
def test_ties_rotate_over_every_lane_and_429_only_without_room(rows: int) -> None:
    with tables(rows, 40) as (table, other):
        admission = Admission(table)

        def pick(turn: int, tried: tuple[str, ...] = ()) -> LaneState | None:
            return admission.choose(
                "m", tried, limit=2, now=1.0, stale_after=STALE_AFTER, turn=turn
            )

        lanes = table.ready("m")
        assert [pick(turn) for turn in range(40)] == list(lanes)  # all tied at 0
        other.add(lanes[5].slot, 1)  # another worker's request: l5 is no longer tied
        assert lanes[5] not in {pick(turn) for turn in range(39)}
        assert pick(0, ("l0", "l1")) is lanes[2]
        for lane in lanes:
            if lane is not lanes[7]:
                lane.begin()
                lane.begin()  # full (limit 2), but for l7
        other.add(lanes[5].slot, -1)  # l5: 2 of ours
        assert {pick(turn) for turn in range(5)} == {lanes[7]}
        lanes[7].begin()
        assert pick(0) is lanes[7]  # one in flight, room for one more
        lanes[7].begin()
        assert pick(0) is None  # no lane has room: 429
        lanes[3].end()
        assert pick(0) is lanes[3]


def test_the_choice_reads_no_lane_it_does_not_need(monkeypatch: pytest.MonkeyPatch) -> None:
    """At 2,000 lanes a choice reads the counts of the lanes that changed, not every lane's
    (the pass read all 2,000 per request)."""
    reads = collections.Counter[int]()
    total = LaneState.outstanding.fget
    assert total is not None

    def counted(lane: LaneState) -> int:
        reads[lane.slot] += 1
        return total(lane)  # type: ignore[no-any-return]

    with tables(2, 2000) as (table, other):
        admission = Admission(table)
        lanes = table.ready("m")
        admission.choose("m", (), limit=8, now=1.0, stale_after=STALE_AFTER, turn=0)
        monkeypatch.setattr(LaneState, "outstanding", property(counted))
        flying: collections.deque[LaneState] = collections.deque()
        for turn in range(300):
            other.add(lanes[turn * 7 % 2000].slot, 1)  # another worker's request
            lane = admission.choose("m", (), limit=8, now=1.0, stale_after=STALE_AFTER, turn=turn)
            assert lane is not None
            lane.begin()
            flying.append(lane)
            if len(flying) > 16:
                flying.popleft().end()
        # per choice: the lanes this worker began and ended since the last, and the other's
        assert sum(reads.values()) <= 300 * 3, sum(reads.values())


FLEET = WALK_UP_TO + 4  # lanes of one model: the endpoint chooses through the index


async def test_fleet_least_outstanding_round_robin_and_429(workers: int) -> None:
    """Over real sockets, with one worker and two: a held request on each lane before any
    lane gets a second (the workers see each other's counts), then 429 when all are full."""
    hold = trio.Event()
    lanes = [FakeLane(f"l{i}") for i in range(FLEET)]
    for lane in lanes:
        lane.hold = hold
    async with (
        running_endpoint(lanes, max_queue_per_lane=2, workers=workers) as ep,
        http_client() as client,
    ):
        statuses: list[int] = []

        async def send() -> None:
            response = await client.post(f"{ep.url}/v1/completions", json=COMPLETION)
            statuses.append(response.status_code)

        async with trio.open_nursery() as nursery:
            for n in range(1, 2 * FLEET + 1):
                nursery.start_soon(send)
                with trio.fail_after(5):  # each lands before the next is sent
                    await wait_until(lanes, lambda n=n: sum(x.completions for x in lanes) >= n)
                counts = [lane.completions for lane in lanes]
                assert max(counts) - min(counts) <= 1, counts
            response = await client.post(f"{ep.url}/v1/completions", json=COMPLETION)
            assert response.status_code == 429
            assert response.headers["retry-after"] == "1"
            assert response.json()["error"]["type"] == "overloaded"
            hold.set()
        assert statuses == [200] * 2 * FLEET
        if workers > 1:
            return  # round robin on ties is per worker (docs/cli.md)
        # every lane idle again: the next FLEET requests, one at a time, visit each lane once
        for lane in lanes:
            lane.received.clear()
        for _ in range(FLEET):
            response = await client.post(f"{ep.url}/v1/completions", json=COMPLETION)
            assert response.status_code == 200
        assert [lane.completions for lane in lanes] == [1] * FLEET


async def test_fleet_lane_with_a_full_queue_is_skipped(workers: int) -> None:
    lanes = [FakeLane(f"l{i}") for i in range(FLEET)]
    lanes[3].waiting = 4
    async with (
        running_endpoint(lanes, max_queue_per_lane=4, workers=workers) as ep,
        http_client() as client,
    ):
        with trio.fail_after(5):  # a bounded poll: the sampler's recording has no event
            while True:
                if any(s.waiting == 4 for s in ep.table.states()):
                    break
                await trio.sleep(0.01)
        await ep.synced()
        for _ in range(2 * FLEET):
            response = await client.post(f"{ep.url}/v1/completions", json=COMPLETION)
            assert response.status_code == 200
        assert lanes[3].completions == 0
