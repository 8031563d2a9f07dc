"""Fake lanes and an in-process endpoint for the endpoint's tests.

A :class:`FakeLane` is a small trio + h11 server whose every behaviour the test sets
exactly: answer a status, hold requests until released, stream chunks one at a time
behind a gate, die mid-stream, hang, reset, and serve a chosen ``/metrics``. It records
what it received and notices when the endpoint hangs up on it.
"""

from __future__ import annotations

import functools
import json
import math
import socket
import ssl
import struct
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace

import h11
import httpx
import trio

from ddsup.endpoint import EndpointConfig, LaneInfo, LaneTable, open_endpoint
from ddsup.units._model import Routing

# Most of these tests are about the choice by load: prefix routing's own tests ask for it.
TEST_CONFIG = EndpointConfig(
    routing=Routing.LEAST_LOAD,
    bind="127.0.0.1",
    port=0,
    retries=2,
    upstream_connect_timeout=1.0,
    upstream_timeout=2.0,
    client_header_timeout=0.5,
    client_body_timeout=0.5,
    client_idle_timeout=5.0,
    metrics_interval=0.05,
    metrics_idle_interval=0.25,  # idle lanes too: tests change a lane's queue at will
    metrics_timeout=0.2,
    metrics_stale_after=0.5,
)


@dataclass
class Received:
    """One request a fake lane received."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class FakeLane:
    """A lane whose behaviour the test sets; see the module docstring."""

    def __init__(self, name: str, model: str = "m") -> None:
        self.name = name
        self.model = model
        self.port = 0
        self.status = 200
        self.headers: list[tuple[bytes, bytes]] = []
        self.hold: trio.Event | None = None  # requests wait until it is set
        self.chunks = 0  # > 0: answer an SSE stream of this many events
        self.gated = False  # each event after the first waits for a release()
        self.die_after: int | None = None  # close abruptly after this many events
        self.hang = False
        self.reset = False
        self.metrics_status = 200
        self.metrics_hold: trio.Event | None = None  # /metrics answers once it is set
        self.metrics_then_close = False  # close the connection after answering /metrics
        self.names: list[str] = []  # more names its /v1/models lists (aliases, adapters)
        self.models_status = 200
        self.waiting: int | None = 0
        self.cache: tuple[int, int] | None = None  # its prefix cache's (queries, hits)
        self.metrics_hits = 0
        self.received: list[Received] = []
        self.disconnected = trio.Event()
        self.events_sent = 0
        self._gate_send, self._gate_recv = trio.open_memory_channel[None](math.inf)
        self._changed = trio.Event()

    @property
    def info(self) -> LaneInfo:
        return LaneInfo(instance=self.name, model=self.model, url=f"http://127.0.0.1:{self.port}")

    @property
    def completions(self) -> int:
        return sum(1 for r in self.received if r.path.startswith("/v1/"))

    def release(self, n: int = 1) -> None:
        for _ in range(n):
            self._gate_send.send_nowait(None)

    async def wait_for(self, predicate: Callable[[], bool]) -> None:
        """Wait until ``predicate()`` holds; re-checked on every change of this lane."""
        while not predicate():
            await self._changed.wait()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            await nursery.start(trio.serve_listeners, self._connection, listeners)
            task_status.started()

    async def _connection(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                request, body = await _read_request(conn, stream)
                if request is None:
                    return
                if not await self._answer(conn, stream, request, body):
                    return
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    return
                conn.start_next_cycle()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self.disconnected.set()
            self._notify()
        finally:
            await trio.aclose_forcefully(stream)

    async def _answer(
        self, conn: h11.Connection, stream: trio.SocketStream, request: h11.Request, body: bytes
    ) -> bool:
        path = request.target.decode()
        if path == "/metrics":
            self.metrics_hits += 1
            self._notify()
            if self.metrics_hold is not None:
                await self.metrics_hold.wait()  # a busy vLLM renders its /metrics late
            text = b"" if self.waiting is None else _metrics_text(self.model, self.waiting)
            if self.cache is not None:
                text += _cache_text(self.model, *self.cache)
            await _send(conn, stream, self.metrics_status, text, [])
            return not self.metrics_then_close  # closed unannounced: a keep-alive timeout
        if path == "/v1/models":  # what vLLM lists: its names and adapters
            cards = [{"id": name, "object": "model"} for name in [self.model, *self.names]]
            listing = json.dumps({"object": "list", "data": cards}).encode()
            await _send(conn, stream, self.models_status, listing, [])
            return True
        headers = {k.decode(): v.decode() for k, v in request.headers}
        self.received.append(Received(request.method.decode(), path, headers, body))
        self._notify()
        if self.reset:
            _abort(stream)
            return False
        if self.hang or self.hold is not None:
            event = trio.Event() if self.hang else self.hold
            assert event is not None
            if not await _wait_or_hangup(stream, event.wait):
                self.disconnected.set()
                self._notify()
                return False
        if self.chunks:
            return await self._stream(conn, stream)
        payload = json.dumps({"lane": self.name, "n": len(self.received)}).encode()
        await _send(conn, stream, self.status, payload, self.headers)
        return True

    async def _stream(self, conn: h11.Connection, stream: trio.SocketStream) -> bool:
        head = [(b"content-type", b"text/event-stream"), *self.headers]
        await stream.send_all(conn.send(h11.Response(status_code=self.status, headers=head)))
        for i in range(self.chunks):
            if i and self.gated and not await _wait_or_hangup(stream, self._gate_recv.receive):
                self.disconnected.set()
                self._notify()
                return False
            if self.die_after is not None and i >= self.die_after:
                _abort(stream)
                return False
            event = f"data: {json.dumps({'lane': self.name, 'i': i})}\n\n".encode()
            self.events_sent += 1  # counted before it leaves: the client may see it at once
            self._notify()
            await stream.send_all(conn.send(h11.Data(data=event)))
        await stream.send_all(conn.send(h11.Data(data=b"data: [DONE]\n\n")))
        await stream.send_all(conn.send(h11.EndOfMessage()))
        return True


async def wait_until(lanes: list[FakeLane], predicate: Callable[[], bool]) -> None:
    """Wait until ``predicate()`` holds, re-checked whenever any of ``lanes`` changes."""
    while not predicate():
        async with trio.open_nursery() as nursery:
            for lane in lanes:
                nursery.start_soon(_then_cancel, lane._changed, nursery.cancel_scope)


async def _then_cancel(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


def http_client() -> httpx.AsyncClient:
    """A test client; the TLS context (never used: plain HTTP) is built once, not per test."""
    return httpx.AsyncClient(verify=_tls_context())


@functools.cache
def _tls_context() -> ssl.SSLContext:
    return ssl.create_default_context()


def _metrics_text(model: str, waiting: int) -> bytes:
    return (
        "# HELP vllm:num_requests_waiting Requests waiting.\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        f'vllm:num_requests_running{{model_name="{model}"}} 1.0\n'
        f'vllm:num_requests_waiting{{model_name="{model}"}} {float(waiting)}\n'
    ).encode()


def _cache_text(model: str, queries: int, hits: int) -> bytes:
    """vLLM's prefix-cache counters, as it writes them (and one that only looks alike)."""
    return (
        "# HELP vllm:prefix_cache_queries_total Prefix cache queries, in tokens.\n"
        "# TYPE vllm:prefix_cache_queries_total counter\n"
        f'vllm:prefix_cache_queries_total{{engine="0",model_name="{model}"}} {float(queries)}\n'
        f'vllm:prefix_cache_queries_created{{engine="0",model_name="{model}"}} 1.7e9\n'
        f'vllm:prefix_cache_hits_total{{engine="0",model_name="{model}"}} {float(hits)}\n'
        f'vllm:external_prefix_cache_hits_total{{engine="0",model_name="{model}"}} 99.0\n'
    ).encode()


async def _read_request(
    conn: h11.Connection, stream: trio.SocketStream
) -> tuple[h11.Request | None, bytes]:
    request: h11.Request | None = None
    chunks: list[bytes] = []
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await stream.receive_some(65536))
        elif isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.Data):
            chunks.append(event.data)
        elif isinstance(event, h11.EndOfMessage):
            return request, b"".join(chunks)
        else:
            return None, b""


async def _send(
    conn: h11.Connection,
    stream: trio.SocketStream,
    status: int,
    body: bytes,
    headers: list[tuple[bytes, bytes]],
) -> None:
    head = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    data = conn.send(h11.Response(status_code=status, headers=[*head, *headers]))
    data += conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage())
    await stream.send_all(data)


async def _wait_or_hangup(stream: trio.SocketStream, wait: object) -> bool:
    """Await ``wait()``; ``False`` if the peer hangs up first (that is what we observe)."""
    assert callable(wait)
    hung_up = False
    async with trio.open_nursery() as nursery:

        async def watch() -> None:
            nonlocal hung_up
            try:
                data = await stream.receive_some(65536)
            except trio.BrokenResourceError:
                data = b""
            if not data:
                hung_up = True
                nursery.cancel_scope.cancel()

        nursery.start_soon(watch)
        await wait()
        nursery.cancel_scope.cancel()
    return not hung_up


def _abort(stream: trio.SocketStream) -> None:
    """Close with RST (SO_LINGER 0), as a crashing lane's kernel would."""
    stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    stream.socket.close()


def closed_port() -> int:
    """A loopback port nobody listens on (bound then closed): connections are refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@dataclass
class Running:
    """An endpoint serving in the test's nursery, and its fake lanes.

    After changing ``table`` (or waiting for a sample in it), ``await synced()`` before
    sending: with several workers the change reaches them over their link.
    """

    url: str
    table: LaneTable
    synced: Callable[[], Awaitable[None]]
    pids: tuple[int, ...]
    lanes: list[FakeLane] = field(default_factory=list)


@asynccontextmanager
async def running_endpoint(
    lanes: list[FakeLane],
    *,
    extra: Sequence[LaneInfo] = (),
    workers: int = 1,
    **overrides: object,
) -> AsyncIterator[Running]:
    """Start ``lanes`` and an endpoint over them (plus ``extra`` lane infos); stop all after."""
    config = replace(TEST_CONFIG, workers=workers, **overrides)  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        for lane in lanes:
            await nursery.start(lane.serve)
        table = LaneTable([*(lane.info for lane in lanes), *extra])
        async with open_endpoint(config, table) as serving:
            url = f"http://127.0.0.1:{serving.port}"
            yield Running(url, table, serving.synced, serving.pids, lanes)
        nursery.cancel_scope.cancel()
