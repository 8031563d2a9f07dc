"""Overload stays overload: 429 and 503 answers, and the Retry-After they carry.

A client backs off on 429 and spends a retry on 502. So when any lane said it is at
capacity (429), or the lanes left had no room, the endpoint answers 429, even when
another lane refused a connection, and its Retry-After is never shorter than what the
lanes asked. Every 429 and every 503 carries a Retry-After, in its header and its JSON.
"""

from __future__ import annotations

import httpx
import trio
from endpoint_fakes import FakeLane, closed_port, http_client, running_endpoint

from ddsup.endpoint import LaneInfo


async def completion(client: httpx.AsyncClient, url: str) -> httpx.Response:
    return await client.post(f"{url}/v1/completions", json={"model": "m"})


def assert_backs_off(response: httpx.Response, status: int, kind: str, seconds: int) -> None:
    """``status`` in the OpenAI error shape, with ``seconds`` in Retry-After and the JSON."""
    assert response.status_code == status, response.text
    assert response.headers["retry-after"] == str(seconds)
    error = response.json()["error"]
    assert {"type", "code", "message", "retry_after"} <= set(error), error
    assert (error["type"], error["code"], error["retry_after"]) == (kind, status, seconds)


async def test_a_lane_at_capacity_wins_over_one_that_refuses_connections(workers: int) -> None:
    """Lane a answers 429 (Retry-After: 7), lane b refuses connections: 429 every time,
    with a's Retry-After, also once b is ejected (after 5 failures in a row)."""
    a = FakeLane("a")
    a.status, a.headers = 429, [(b"retry-after", b"7")]
    refusing = LaneInfo("b", "m", f"http://127.0.0.1:{closed_port()}")
    async with (
        running_endpoint([a], extra=[refusing], workers=workers) as ep,
        http_client() as client,
    ):
        for _ in range(11):
            assert_backs_off(await completion(client, ep.url), 429, "overloaded", 7)
        metrics = (await client.get(f"{ep.url}/metrics")).text
    assert 'ddsup_endpoint_lane_ejected{lane="b",model="m"} 1' in metrics
    assert a.completions == 11


async def test_the_longest_retry_after_the_lanes_asked_is_the_answers(workers: int) -> None:
    a, b = FakeLane("a"), FakeLane("b")
    a.status, a.headers = 429, [(b"retry-after", b"7")]
    b.status, b.headers = 429, [(b"retry-after", b"9")]
    async with (
        running_endpoint([a, b], retry_after=1.0, workers=workers) as ep,
        http_client() as client,
    ):
        for _ in range(4):
            assert_backs_off(await completion(client, ep.url), 429, "overloaded", 9)
        b.headers = [(b"retry-after", b"Thu, 01 Jan 1970 00:00:00 GMT")]  # a date long past
        assert_backs_off(await completion(client, ep.url), 429, "overloaded", 7)
        a.headers = b.headers = []  # none asked: the endpoint's own
        assert_backs_off(await completion(client, ep.url), 429, "overloaded", 1)


async def test_no_room_left_after_a_refused_connection_is_429(workers: int) -> None:
    """Lane b is full (``max_queue_per_lane`` 1, a request held there), lane a refuses
    connections: a request tried on a, with no room on b, is told to come back (429)."""
    b = FakeLane("b")
    b.hold = trio.Event()
    refusing = LaneInfo("a", "m", f"http://127.0.0.1:{closed_port()}")
    async with (
        running_endpoint([b], extra=[refusing], max_queue_per_lane=1, workers=workers) as ep,
        http_client() as client,
        trio.open_nursery() as nursery,
    ):
        held: list[httpx.Response] = []

        async def hold_b() -> None:
            held.append(await completion(client, ep.url))

        nursery.start_soon(hold_b)
        with trio.fail_after(5):
            await b.wait_for(lambda: b.completions == 1)
        assert_backs_off(await completion(client, ep.url), 429, "overloaded", 1)
        b.hold.set()
    assert held[0].status_code == 200


async def test_every_503_says_when_to_come_back(workers: int) -> None:
    a = FakeLane("a")
    async with (
        running_endpoint([a], retry_after=2.5, workers=workers) as ep,
        http_client() as client,
    ):
        ep.table.remove("a")
        await ep.synced()
        assert_backs_off(await completion(client, ep.url), 503, "no_ready_lane", 3)
        health = await client.get(f"{ep.url}/health")
        assert health.status_code == 503
        assert health.headers["retry-after"] == "3"
        assert health.json()["status"] == "unavailable"
