"""The endpoint's request paths leave no reference cycles behind.

The ``ddsup endpoint`` process turns CPython's automatic collector off and collects on
a timer (:mod:`ddsup.endpoint._gc_pacing`); that is sound only while serving requests
creates no cyclic garbage, which refcounting alone cannot free. Here the endpoint, its
lanes and the client all run in this process with the collector off, over real
sockets: after a warm-up, a batch of answered, streamed and refused requests must leave
nothing for the collector to find.
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import trio
import trio.testing
from endpoint_fakes import FakeLane, running_endpoint

from ddsup.endpoint._gc_pacing import YOUNG_EVERY, pace_garbage_collection


def _request(body: bytes) -> bytes:
    head = f"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: {len(body)}\r\n\r\n"
    return head.encode() + body


class _KeepAlive:
    """One keep-alive connection; reads one content-length or chunked answer at a time."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buf = b""

    async def exchange(self, request: bytes) -> int:
        await self.stream.send_all(request)
        head = await self._until(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        headers = dict(line.lower().split(b": ", 1) for line in lines[1:])
        if b"content-length" in headers:
            await self._take(int(headers[b"content-length"]))
        else:
            while (size := int(await self._until(b"\r\n"), 16)) > 0:
                await self._take(size + 2)
            await self._take(2)
        return int(lines[0].split()[1])

    async def _until(self, mark: bytes) -> bytes:
        while mark not in self.buf:
            await self._receive()
        found, self.buf = self.buf.split(mark, 1)
        return found

    async def _take(self, count: int) -> None:
        while len(self.buf) < count:
            await self._receive()
        self.buf = self.buf[count:]

    async def _receive(self) -> None:
        data = await self.stream.receive_some(65536)
        assert data, "the endpoint closed a keep-alive connection"
        self.buf += data


@contextmanager
def _collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds stays in gc.garbage
    try:
        yield
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def _cyclic_garbage() -> Counter[str]:
    gc.garbage.clear()
    gc.collect()
    return Counter(type(obj).__qualname__ for obj in gc.garbage)


async def _batch(url: str, lane: FakeLane, n: int) -> Counter[int]:
    """``n`` rounds of: a plain answer, a stream, a 429, a 404 and a 400, on one connection."""
    statuses: Counter[int] = Counter()
    port = int(url.rsplit(":", 1)[1])
    conn = _KeepAlive(await trio.open_tcp_stream("127.0.0.1", port))
    async with conn.stream:
        for _ in range(n):
            lane.chunks = 0
            statuses[await conn.exchange(_request(b'{"model":"m"}'))] += 1
            lane.chunks = 3
            statuses[await conn.exchange(_request(b'{"model":"m","stream":true}'))] += 1
            statuses[await conn.exchange(_request(b'{"model":"busy"}'))] += 1
            statuses[await conn.exchange(_request(b'{"model":"nope"}'))] += 1
            statuses[await conn.exchange(_request(b"{not json"))] += 1
    return statuses


async def test_serving_requests_leaves_no_cycles() -> None:
    lane, busy = FakeLane("a"), FakeLane("b", model="busy")
    busy.hold = trio.Event()  # its one admitted request waits: every other one gets 429
    with _collector_off():
        async with running_endpoint([lane, busy], max_queue_per_lane=1, retries=0) as ep:
            port = int(ep.url.rsplit(":", 1)[1])
            async with await trio.open_tcp_stream("127.0.0.1", port) as held:
                await held.send_all(_request(b'{"model":"busy"}'))
                await busy.wait_for(lambda: busy.completions == 1)
                with trio.fail_after(10):
                    await _batch(ep.url, lane, 5)  # warm-up: pools, caches
                    before = _cyclic_garbage()
                    statuses = await _batch(ep.url, lane, 50)
                    after = _cyclic_garbage()
                busy.hold.set()
    assert statuses == {200: 100, 429: 50, 404: 50, 400: 50}
    assert not after, f"cycles left by 250 requests: {after.most_common(10)} (warm-up: {before})"


async def test_the_pacer_collects_the_young_generation_on_its_timer() -> None:
    collected = trio.Event()
    generations: list[int] = []

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "stop":
            generations.append(info["generation"])
            collected.set()

    assert gc.isenabled()
    gc.callbacks.append(seen)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(pace_garbage_collection)
            await trio.testing.wait_all_tasks_blocked()  # the pacer is in its first sleep
            assert not gc.isenabled()  # no automatic collection while it runs
            assert gc.get_freeze_count() > 0  # what start-up made is left alone
            with trio.fail_after(20 * YOUNG_EVERY):
                await collected.wait()
            nursery.cancel_scope.cancel()
    finally:
        gc.callbacks.remove(seen)
    assert generations[0] == 0
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0
