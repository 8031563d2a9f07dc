"""Which lanes' /metrics the endpoint samples, and when.

Fetching every lane's /metrics every second would keep a core busy in front of a thousand
idle lanes. A lane with nothing in flight and no queue of its own is sampled once per
``metrics_idle_interval``; traffic to it, or a queue of its own, brings it back to every
``metrics_interval``, so admission gets a fresh sample within one interval.
"""

from __future__ import annotations

from typing import Any

import httpx
import trio
from endpoint_fakes import FakeLane, Running, http_client, running_endpoint, wait_until

INTERVAL = 0.05  # TEST_CONFIG's metrics_interval
SLOW = 60.0  # an idle interval no test waits out: an idle lane is sampled when it joins


async def post(client: httpx.AsyncClient, url: str) -> httpx.Response:
    body: dict[str, Any] = {"model": "m", "prompt": "hi"}
    return await client.post(f"{url}/v1/completions", json=body)


async def _ticks(clock: FakeLane, n: int) -> None:
    """Until the sampler fetched ``clock`` (a lane with a queue) ``n`` more times."""
    target = clock.metrics_hits + n
    with trio.fail_after(10):
        await wait_until([clock], lambda: clock.metrics_hits >= target)


async def _sampled(ep: Running, instance: str, waiting: int, within: float) -> None:
    """Until every worker routes by a sample of ``waiting`` for ``instance``.

    A bounded poll: the sampler's recording has no event to await.
    """
    with trio.fail_after(within):
        while True:
            state = next(s for s in ep.table.states() if s.info.instance == instance)
            if state.waiting == waiting:
                break
            await trio.sleep(INTERVAL / 5)
        await ep.synced()


async def test_an_idle_lane_is_not_fetched_every_interval(workers: int) -> None:
    idle, other, clock = FakeLane("idle"), FakeLane("other"), FakeLane("clock")
    clock.waiting = 1  # a queue of its own: sampled every tick, so it counts the ticks
    lanes = [idle, other, clock]
    async with running_endpoint(lanes, workers=workers, metrics_idle_interval=SLOW):
        await _ticks(clock, 12)
        # sampled when they joined, then not again for SLOW seconds (was: every tick)
        assert (idle.metrics_hits, other.metrics_hits) == (1, 1)


async def test_traffic_to_an_idle_lane_brings_a_fresh_sample_within_an_interval(
    workers: int,
) -> None:
    lane, clock = FakeLane("a"), FakeLane("clock", model="other")
    clock.waiting = 1
    async with (
        running_endpoint(
            [lane, clock], workers=workers, metrics_idle_interval=SLOW, max_queue_per_lane=4
        ) as ep,
        http_client() as client,
    ):
        await _ticks(clock, 3)
        assert lane.metrics_hits == 1  # idle: sampled once, when it joined
        lane.waiting = 50  # a queue built by others; the old sample says 0
        # the documented bound: until the next tick, admission counts only our requests
        assert (await post(client, ep.url)).status_code == 200
        # that request was over before the next tick; its mark still brings a sample
        # a tick is 50 ms; the bound leaves room for a loaded machine and stays far below
        # SLOW, when the lane's idle sample would come without the mark
        await _sampled(ep, "a", 50, within=3.0)
        response = await post(client, ep.url)
        assert response.status_code == 429
        assert response.json()["error"]["type"] == "overloaded"
        # a lane with a queue of its own stays watched every tick, traffic or not
        await _ticks(clock, 5)
        hits = lane.metrics_hits
        await _ticks(clock, 5)
        assert lane.metrics_hits >= hits + 4
        lane.waiting = 0  # the queue drained: the next sample lets requests through again
        await _sampled(ep, "a", 0, within=3.0)
        assert (await post(client, ep.url)).status_code == 200


async def test_requests_in_flight_keep_a_lane_sampled(workers: int) -> None:
    lane, clock = FakeLane("a"), FakeLane("clock", model="other")
    clock.waiting = 1
    lane.hold = trio.Event()
    async with (
        running_endpoint([lane, clock], workers=workers, metrics_idle_interval=SLOW) as ep,
        http_client() as client,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(post, client, ep.url)
        with trio.fail_after(5):
            await wait_until([lane], lambda: len(lane.received) == 1)
        await _ticks(clock, 3)  # the mark of its start is taken by now
        hits = lane.metrics_hits
        await _ticks(clock, 5)
        assert lane.metrics_hits >= hits + 4  # in flight: every tick
        lane.hold.set()


async def test_a_slow_metrics_holds_back_no_other_lane_and_still_counts(workers: int) -> None:
    """vLLM under a burst renders /metrics seconds late: that lane's fetch goes on (and
    is not sent again meanwhile) while the other lanes are sampled every interval, and
    its sample counts once it arrives within ``metrics_timeout``."""
    slow, clock = FakeLane("slow"), FakeLane("clock", model="other")
    slow.waiting, clock.waiting = 7, 1  # queues of their own: both due every tick
    slow.metrics_hold = trio.Event()
    async with running_endpoint(
        [slow, clock], workers=workers, metrics_timeout=SLOW, metrics_stale_after=SLOW
    ) as ep:
        await wait_until([slow], lambda: slow.metrics_hits == 1)
        await _ticks(clock, 20)  # was: one round per slow fetch
        assert slow.metrics_hits == 1
        slow.metrics_hold.set()
        await _sampled(ep, "slow", 7, within=5)
        async with http_client() as client:
            text = (await client.get(f"{ep.url}/metrics")).text
        assert 'lane_metrics_errors_total{lane="slow"}' not in text


async def test_a_kept_connection_the_lane_closed_is_replaced(workers: int) -> None:
    """vLLM's server closes a connection idle for 5 s without a word: the next sample
    on it goes out again on a new connection instead of counting as a failure."""
    lane = FakeLane("a")
    lane.waiting = 3  # a queue of its own: sampled every tick
    lane.metrics_then_close = True
    async with running_endpoint([lane], workers=workers) as ep:
        await _ticks(lane, 6)
        async with http_client() as client:
            text = (await client.get(f"{ep.url}/metrics")).text
    assert "lane_metrics_errors_total{" not in text
