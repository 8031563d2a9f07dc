"""A bound on what one lane is sent at once (``max_in_flight_per_lane``): the rest wait in
the endpoint, a lane that frees a slot takes one of them (under prefix routing, one whose
prompt it holds), no lane idles while a request waits, and a waiting request ends on its
client's hang-up, its deadline, or a full queue."""

from __future__ import annotations

import argparse
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import httpx
import pytest
import trio
from endpoint_fakes import FakeLane, http_client, running_endpoint
from test_endpoint_prefix_http import TEMPLATES, _sample, record

from ddsup.endpoint import configure_endpoint
from ddsup.endpoint._admission import Admission
from ddsup.endpoint._connection import Hangup
from ddsup.endpoint._deadlines import Deadlines
from ddsup.endpoint._endpoint_command import config_from_args
from ddsup.endpoint._lane_slots import LaneSlots
from ddsup.endpoint._lanes import LaneInfo, LaneState, LaneTable
from ddsup.endpoint._prefix_routing import PrefixIndex, PrefixPolicy, PrefixRouter, prompt_keys
from ddsup.units._model import Routing
from support.polls import until

WAITING = 'ddsup_endpoint_waiting_requests{model="m"}'


async def _until_waiting(client: httpx.AsyncClient, url: str, n: int) -> None:
    """Until the endpoint's gauge says ``n`` requests wait (a gauge: no event to await)."""
    with trio.fail_after(10):
        while _sample((await client.get(f"{url}/metrics")).text, WAITING) != n:  # noqa: ASYNC110
            await trio.sleep(0.02)  # a bounded poll: a gauge of another server


async def _until_completions(lanes: list[FakeLane], n: int) -> None:
    with trio.fail_after(10):
        for lane in lanes:
            await lane.wait_for(lambda lane=lane: lane.completions >= n)  # type: ignore[misc]


async def test_a_lane_is_sent_at_most_its_slots_and_the_rest_wait_for_one() -> None:
    lanes = [FakeLane("a"), FakeLane("b")]
    held = trio.Event()
    for lane in lanes:
        lane.hold = held
    statuses: list[int] = []

    async def post(client: httpx.AsyncClient, url: str, i: int) -> None:
        response = await client.post(f"{url}/v1/completions", json=record(0, i))
        statuses.append(response.status_code)

    async with (
        running_endpoint(lanes, max_in_flight_per_lane=2) as ep,
        http_client() as client,
    ):
        async with trio.open_nursery() as nursery:
            for i in range(7):
                nursery.start_soon(post, client, ep.url, i)
            await _until_waiting(client, ep.url, 3)
            assert [lane.completions for lane in lanes] == [2, 2]
            held.set()
        metrics = (await client.get(f"{ep.url}/metrics")).text
    assert statuses == [200] * 7
    assert sum(lane.completions for lane in lanes) == 7
    assert _sample(metrics, WAITING) == 0


async def test_a_freed_slot_goes_to_the_waiting_request_whose_prompt_the_lane_holds() -> None:
    """Lane b frees its slot while a record of a's template waited longer than one of b's:
    b takes its own template's record first, then a's (it would idle otherwise)."""
    lanes = [FakeLane("a"), FakeLane("b")]
    config = {"routing": Routing.PREFIX, "max_in_flight_per_lane": 1}
    async with running_endpoint(lanes, **config) as ep, http_client() as client:
        for template in (0, 1):  # a holds template 0, b template 1
            await client.post(f"{ep.url}/v1/completions", json=record(template, 0))
        assert [lane.completions for lane in lanes] == [1, 1]
        lanes[0].hold, lanes[1].hold = trio.Event(), trio.Event()
        async with trio.open_nursery() as nursery:
            for template in (0, 1):  # one in flight on each lane
                nursery.start_soon(
                    partial(client.post, json=record(template, 1)), f"{ep.url}/v1/completions"
                )
            await _until_completions(lanes, 2)
            for n, template in enumerate((0, 1), 1):  # then two wait: a's template first
                nursery.start_soon(
                    partial(client.post, json=record(template, 2)), f"{ep.url}/v1/completions"
                )
                await _until_waiting(client, ep.url, n)
            lanes[1].hold.set()
            with trio.fail_after(10):
                await lanes[1].wait_for(lambda: lanes[1].completions == 4)
            lanes[0].hold.set()
        metrics = (await client.get(f"{ep.url}/metrics")).text
    sent_to_b = [r.body for r in lanes[1].received if r.path.startswith("/v1/")]
    assert [TEMPLATES[1][:40].encode() in body for body in sent_to_b] == [True, True, True, False]
    routed = 'ddsup_endpoint_prefix_routed_total{model="m",choice="%s"}'
    assert _sample(metrics, routed % "free_slot") == 1  # a's record, on b


async def test_no_lane_idles_while_a_request_waits() -> None:
    """Every record is of the template lane a holds; b, with a free slot, takes them too."""
    lanes = [FakeLane("a"), FakeLane("b")]
    config = {"routing": Routing.PREFIX, "max_in_flight_per_lane": 1}
    async with running_endpoint(lanes, **config) as ep, http_client() as client:
        await client.post(f"{ep.url}/v1/completions", json=record(0, 0))
        held = lanes[0].hold = lanes[1].hold = trio.Event()
        async with trio.open_nursery() as nursery:
            for i in range(1, 4):
                nursery.start_soon(
                    partial(client.post, json=record(0, i)), f"{ep.url}/v1/completions"
                )
            await _until_waiting(client, ep.url, 1)
            assert [lane.completions for lane in lanes] == [2, 1]
            held.set()


async def test_a_waiting_request_whose_client_hangs_up_is_never_sent() -> None:
    lane = FakeLane("a")
    lane.hold = held = trio.Event()
    url = ""
    async with (
        running_endpoint([lane], max_in_flight_per_lane=1) as ep,
        http_client() as client,
        trio.open_nursery() as nursery,
    ):
        url = f"{ep.url}/v1/completions"
        nursery.start_soon(partial(client.post, json=record(0, 1)), url)
        await lane.wait_for(lambda: lane.completions == 1)
        nursery.start_soon(partial(client.post, json=record(0, 2)), url)
        await _until_waiting(client, ep.url, 1)
        async with http_client() as leaving, trio.open_nursery() as inner:
            inner.start_soon(partial(leaving.post, json=record(0, 3)), url)
            await _until_waiting(client, ep.url, 2)
            inner.cancel_scope.cancel()  # its client hangs up: the connection closes
        await _until_waiting(client, ep.url, 1)
        held.set()
        await lane.wait_for(lambda: lane.completions == 2)
        metrics = (await client.get(f"{ep.url}/metrics")).text
    assert b"Record 3" not in b"".join(r.body for r in lane.received)
    assert _sample(metrics, 'ddsup_endpoint_requests_total{model="m",status="499"}') == 1


async def test_a_request_that_finds_no_free_slot_within_the_timeout_gets_429() -> None:
    lane = FakeLane("a")
    async with (
        running_endpoint([lane], max_in_flight_per_lane=1, upstream_timeout=0.5) as ep,
        http_client() as client,
    ):
        state = ep.table.state_of("a")
        assert state is not None
        state.begin()  # the one slot is taken (as by another worker's request) and kept
        began = time.monotonic()
        response = await client.post(f"{ep.url}/v1/completions", json=record(0, 2))
        waited = time.monotonic() - began
        state.end()
        metrics = (await client.get(f"{ep.url}/metrics")).text
    assert response.status_code == 429
    assert response.headers["retry-after"] == "1"
    assert "no lane had a free slot within 0.5 s" in response.json()["error"]["message"]
    assert 0.5 <= waited < 5
    assert lane.completions == 0
    assert _sample(metrics, 'ddsup_endpoint_rejected_total{model="m",reason="slot_timeout"}') == 1


async def test_a_full_queue_of_waiting_requests_gets_429_at_once() -> None:
    """One lane, one slot, two queued per lane: one request in flight, one waits, the
    third is refused."""
    lane = FakeLane("a")
    lane.hold = held = trio.Event()
    config = {"max_in_flight_per_lane": 1, "max_queue_per_lane": 2}
    async with (
        running_endpoint([lane], **config) as ep,
        http_client() as client,
        trio.open_nursery() as nursery,
    ):
        for i in range(2):
            nursery.start_soon(partial(client.post, json=record(0, i)), f"{ep.url}/v1/completions")
        await _until_waiting(client, ep.url, 1)
        response = await client.post(f"{ep.url}/v1/completions", json=record(0, 9))
        held.set()
    assert response.status_code == 429
    assert "2 queued per lane" in response.json()["error"]["message"]


async def test_a_slot_freed_elsewhere_is_found_while_requests_wait() -> None:
    """A slot that frees without this worker's request ending (another worker's request,
    say) goes to a waiting request within a tick."""
    table = LaneTable([LaneInfo("a", "m", "http://127.0.0.1:9")])
    (lane,) = table.ready("m")
    slots = LaneSlots(table, Admission(table), Deadlines(60.0), None, limit=1, stale_after=1.0)
    lane.begin()  # another worker's request holds the one slot
    got: list[str] = []

    async def wait() -> None:
        given, _ = await slots.wait("m", (), (), Hangup(), time.monotonic() + 60)
        got.append(given.info.instance)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(slots.run)
        nursery.start_soon(wait)
        await trio.testing.wait_all_tasks_blocked()
        assert slots.counts() == [("m", 1)]
        lane.end()  # ends there: this worker is not told
        await until(lambda: got, "the slot handed over by the tick", limit=5, interval=0.005)
        nursery.cancel_scope.cancel()
    assert got == ["a"]
    assert lane.outstanding == 1  # the slot is the waiting request's now
    assert slots.counts() == [("m", 0)]


def test_ddsup_endpoint_takes_the_bound_on_its_command_line() -> None:
    parser = argparse.ArgumentParser()
    configure_endpoint(parser)
    lane = ["--lane", "m=http://127.0.0.1:9"]
    config = config_from_args(parser.parse_args([*lane, "--max-in-flight-per-lane", "4"]))
    assert config.max_in_flight_per_lane == 4
    assert config_from_args(parser.parse_args(lane)).max_in_flight_per_lane == 0
    with pytest.raises(Exception, match="max_in_flight_per_lane must be >= 0"):
        config_from_args(parser.parse_args([*lane, "--max-in-flight-per-lane", "-1"]))


async def test_a_waiting_request_gets_503_when_every_lane_of_its_model_leaves() -> None:
    lane = FakeLane("a")
    lane.hold = held = trio.Event()
    async with (
        running_endpoint([lane], max_in_flight_per_lane=1) as ep,
        http_client() as client,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(partial(client.post, json=record(0, 1)), f"{ep.url}/v1/completions")
        await lane.wait_for(lambda: lane.completions == 1)
        async with trio.open_nursery() as inner:
            answers: list[httpx.Response] = []

            async def post() -> None:
                answers.append(await client.post(f"{ep.url}/v1/completions", json=record(0, 2)))

            inner.start_soon(post)
            await _until_waiting(client, ep.url, 1)
            ep.table.remove("a")  # it leaves the rotation; its request in flight goes on
        held.set()
    assert answers[0].status_code == 503
    assert answers[0].json()["error"]["type"] == "no_ready_lane"
    assert lane.completions == 1


async def test_every_worker_keeps_to_the_bound_and_counts_its_waiting_requests() -> None:
    """Two workers, one lane of two slots, six clients on their own connections: the lane
    is sent two (one more at most, when both workers take the same slot at once), the
    gauge sums both workers' waiting requests, and every request is answered."""
    lane = FakeLane("a")
    lane.hold = held = trio.Event()
    statuses: list[int] = []

    async def post(url: str, i: int) -> None:
        async with http_client() as own:  # a connection of its own: either worker's
            response = await own.post(f"{url}/v1/completions", json=record(0, i))
            statuses.append(response.status_code)

    async with (
        running_endpoint([lane], workers=2, max_in_flight_per_lane=2) as ep,
        http_client() as client,
        trio.open_nursery() as nursery,
    ):
        for i in range(6):
            nursery.start_soon(post, ep.url, i)
        with trio.fail_after(10):
            while True:  # a bounded poll: a gauge of other processes
                waiting = _sample((await client.get(f"{ep.url}/metrics")).text, WAITING) or 0
                if lane.completions >= 2 and waiting + lane.completions == 6:
                    break
                await trio.sleep(0.02)
        assert lane.completions <= 3
        held.set()
    assert statuses == [200] * 6


def _keys(template: str, i: int) -> list[int]:
    """The keys of record ``i`` of a template of 400 characters (``template`` × 400)."""
    return prompt_keys({"prompt": f"{template * 400}\nRecord {i}"}, "m")


def _slots(
    limit: int, sent: dict[str, str], policy: PrefixPolicy | None = None
) -> tuple[LaneSlots, LaneState, LaneState]:
    """In-process slots over lanes a and b, each template of ``sent`` sent to its lanes
    in order (``{"A": "ab"}``: a first, then a copy on b)."""
    table = LaneTable(
        [LaneInfo(n, "m", f"http://127.0.0.1:{9000 + i}") for i, n in enumerate("ab")]
    )
    router = PrefixRouter(
        table,
        policy or PrefixPolicy(),
        PrefixIndex(1 << 16, 600.0),
        limit=limit,
        stale_after=1.0,
    )
    a, b = table.ready("m")
    for template, names in sent.items():
        for name in names:
            router.index.record(_keys(template, 0), a if name == "a" else b, time.monotonic())
    slots = LaneSlots(
        table, Admission(table), Deadlines(60.0), router, limit=limit, stale_after=1.0
    )
    return slots, a, b


class _Waits:
    """Requests that wait on ``slots``, one per template; ``order``: what each got."""

    def __init__(self, slots: LaneSlots, nursery: trio.Nursery) -> None:
        self.slots, self.nursery = slots, nursery
        self.order: list[str] = []

    async def start(self, templates: str) -> None:
        for template in templates:
            self.nursery.start_soon(self._wait, template)
            await trio.testing.wait_all_tasks_blocked()

    async def _wait(self, template: str) -> None:
        deadline = time.monotonic() + 60
        lane, why = await self.slots.wait("m", _keys(template, 1), (), Hangup(), deadline)
        self.order.append(f"{template}:{lane.info.instance}:{why}")

    async def end_one(self, lane: LaneState) -> None:
        """One of ``lane``'s requests ends: its slot goes to the waiting one that suits it."""
        lane.end()
        self.slots.freed(lane)
        await trio.testing.wait_all_tasks_blocked()


@asynccontextmanager
async def _waits(slots: LaneSlots) -> AsyncIterator[_Waits]:
    """Requests that wait on ``slots``; those still waiting at the end are cancelled
    (the test's assertions, made inside, said whether any should be)."""
    async with trio.open_nursery() as nursery:
        yield _Waits(slots, nursery)
        nursery.cancel_scope.cancel()


def _busy(lane: LaneState, requests: int) -> None:
    for _ in range(requests):
        lane.begin()


async def test_a_lane_takes_its_own_template_then_a_copy_then_a_new_one_then_any() -> None:
    """Lane b frees a slot four times while four requests wait, oldest first: one of a's
    template, one of no lane's, one of a template b holds a copy of, one b was sent first."""
    slots, a, b = _slots(1, {"A": "a", "C": "ab", "B": "b"})
    _busy(a, 1)
    _busy(b, 1)
    async with _waits(slots) as waits:
        await waits.start("ANCB")  # N: a new template, held by no lane
        for _ in range(4):
            await waits.end_one(b)
        assert waits.order == ["B:b:prefix", "C:b:prefix", "N:b:no_match", "A:b:free_slot"]


async def test_a_busy_lane_computes_another_lanes_template_only_about_to_run_dry() -> None:
    """Lane b, with two of its three slots busy, takes a new template's request at once,
    but one of a's template (computing it would push b's own templates out of its cache)
    only once it is down to one request in flight."""
    slots, a, b = _slots(3, {"A": "a"})
    _busy(a, 3)
    _busy(b, 2)
    async with _waits(slots) as waits:
        await waits.start("AN")
        assert waits.order == ["N:b:no_match"]  # b is full now
        await waits.end_one(b)
        assert waits.order == ["N:b:no_match"]  # two in flight: the slot waits
        await waits.end_one(b)
        assert waits.order == ["N:b:no_match", "A:b:free_slot"]


async def test_a_busy_lane_takes_another_lanes_template_when_load_is_unbalanced() -> None:
    """With ``prefix_balance_requests = 0`` and ``prefix_balance_ratio = 1``, a with three
    in flight is unbalanced against b with two: b takes a's template at once."""
    slots, a, b = _slots(3, {"A": "a"}, PrefixPolicy(balance_requests=0, balance_ratio=1.0))
    _busy(a, 3)
    _busy(b, 2)
    async with _waits(slots) as waits:
        await waits.start("A")
        assert waits.order == ["A:b:free_slot"]


@pytest.mark.parametrize("looked_at", ["by the tick, still busy", "down to one in flight"])
async def test_a_lane_takes_a_waiting_request_it_was_sent_a_copy_of_meanwhile_as_a_copy(
    looked_at: str,
) -> None:
    """A request of a's template waits while b, with two in flight, keeps its free slot;
    b is then sent a copy of it (by another request). When b looks at the slot again,
    busy or about to run dry, it takes the request as one whose prompt it holds (a copy
    ranks above a new template), not as one computed for a free slot."""
    slots, a, b = _slots(3, {"A": "a"})
    _busy(a, 3)
    _busy(b, 2)
    async with _waits(slots) as waits:
        await waits.start("A")
        assert waits.order == []
        assert slots.prefixes is not None
        slots.prefixes.index.record(_keys("A", 5), b, time.monotonic())
        if looked_at == "down to one in flight":
            await waits.end_one(b)
        else:
            slots.dispatch("m", time.monotonic())
            await trio.testing.wait_all_tasks_blocked()
        assert waits.order == ["A:b:prefix"]
