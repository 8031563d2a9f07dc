"""Streamed answers relayed event by event: as they come, intact, cut short when the lane
fails, and paced by a client that does not read.

The lane here writes each piece of its answer only when the test says so, so every
event arrives at the endpoint as a read of its own, while the request waits on the
lane: the case the server's stream relay (``_stream_relay``) takes over from the
request's task. Each test states what a client sees, whichever of the two relays it.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

import trio
from endpoint_fakes import FakeLane, running_endpoint
from test_endpoint_fast_path import Conversation, post

from ddsup.endpoint._server import _serve_connection

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
END = b"0\r\n\r\n"
RESET = object()  # the lane resets the connection (RST) instead of sending
NEXT = object()  # this answer is complete: the lane reads the next request


def event(n: int) -> bytes:
    data = b"data: %d\n\n" % n
    return b"%x\r\n%s\r\n" % (len(data), data)


async def _stepped_lane(
    steps: trio.MemoryReceiveChannel[object],
    *,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """A lane that answers with a chunked head, then sends each step as the test gives it."""

    async def answer(stream: trio.SocketStream) -> None:
        received = b""
        while True:
            while b"}" not in received:  # the end of the request's JSON body
                data = await stream.receive_some(65536)
                if not data:
                    return
                received += data
            received = received.split(b"}", 1)[1]
            await stream.send_all(HEAD)
            while (step := await steps.receive()) is not NEXT:
                if step is RESET:
                    linger = struct.pack("ii", 1, 0)
                    stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
                    await stream.aclose()
                    return
                assert isinstance(step, bytes)
                await stream.send_all(step)

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    async with trio.open_nursery() as nursery:
        await nursery.start(trio.serve_listeners, answer, listeners)
        task_status.started(listeners[0].socket.getsockname()[1])


async def _receive_until(talk: Conversation, mark: bytes) -> bytes:
    with trio.fail_after(10):
        while mark not in talk.buf:
            data = await talk.stream.receive_some(65536)
            assert data, f"the endpoint closed before {mark!r}; got {talk.buf!r}"
            talk.buf += data
    found, talk.buf = talk.buf.split(mark, 1)
    return found + mark


async def _received_all(talk: Conversation) -> bytes:
    """Everything until the endpoint closes the connection."""
    with trio.fail_after(10):
        while data := await talk.stream.receive_some(65536):
            talk.buf += data
    return talk.buf


async def test_each_event_reaches_the_client_before_the_next_is_sent(workers: int) -> None:
    """Event by event, then the connection serves the next stream (kept alive, both sides)."""
    send, receive = trio.open_memory_channel[object](0)
    async with trio.open_nursery() as nursery:
        lane = FakeLane("stepped")
        lane.port = await nursery.start(_stepped_lane, receive)
        async with running_endpoint([], extra=[lane.info], workers=workers) as ep:
            talk = await Conversation.open(ep.url)
            async with talk.stream:
                for request in range(2):
                    await talk.stream.send_all(post(b'{"model":"m","stream":true}'))
                    head = await _receive_until(talk, b"\r\n\r\n")
                    assert head.startswith(b"HTTP/1.1 200 ")
                    for n in range(5):
                        await send.send(event(n))
                        assert await _receive_until(talk, b"\n\n\r\n") == event(n)
                    await send.send(END)
                    assert await _receive_until(talk, END) == END
                    await send.send(NEXT)
                    assert request == 0 or not talk.buf
        nursery.cancel_scope.cancel()


async def test_bad_bytes_mid_stream_cut_the_response_short(workers: int) -> None:
    """A lane that breaks its chunked framing mid-stream: the client's response ends
    without its last chunk (it must not look complete), and the endpoint serves on."""
    send, receive = trio.open_memory_channel[object](0)
    async with trio.open_nursery() as nursery:
        lane = FakeLane("stepped")
        lane.port = await nursery.start(_stepped_lane, receive)
        async with running_endpoint([], extra=[lane.info], workers=workers) as ep:
            talk = await Conversation.open(ep.url)
            async with talk.stream:
                await talk.stream.send_all(post(b'{"model":"m","stream":true}'))
                await _receive_until(talk, b"\r\n\r\n")
                await send.send(event(1))
                assert await _receive_until(talk, b"\n\n\r\n") == event(1)
                await send.send(b"zz\r\nnot a chunk\r\n")
                assert await _received_all(talk) == b""  # closed, no last chunk
            await send.send(RESET)  # the lane's connection is done with
            again = await Conversation.open(ep.url)
            async with again.stream:
                await again.stream.send_all(post(b'{"model":"m","stream":true}'))
                await _receive_until(again, b"\r\n\r\n")
                await send.send(event(2) + END)
                assert await _receive_until(again, END) == event(2) + END
                await send.send(NEXT)
        nursery.cancel_scope.cancel()


async def test_a_lane_reset_mid_stream_cuts_the_response_short(workers: int) -> None:
    send, receive = trio.open_memory_channel[object](0)
    async with trio.open_nursery() as nursery:
        lane = FakeLane("stepped")
        lane.port = await nursery.start(_stepped_lane, receive)
        async with running_endpoint([], extra=[lane.info], workers=workers) as ep:
            talk = await Conversation.open(ep.url)
            async with talk.stream:
                await talk.stream.send_all(post(b'{"model":"m","stream":true}'))
                await _receive_until(talk, b"\r\n\r\n")
                await send.send(event(1))
                assert await _receive_until(talk, b"\n\n\r\n") == event(1)
                await send.send(RESET)
                assert await _received_all(talk) == b""  # closed, no last chunk
        nursery.cancel_scope.cancel()


async def _flooding_lane(
    total: int,
    sent: list[int],
    blocked: trio.Event,
    done: trio.Event,
    *,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """A lane that streams ``total`` bytes of events as fast as the endpoint takes them;
    ``sent[0]`` counts what went; ``blocked`` is set once a write had to wait, ``done``
    once everything went."""
    chunk = b"%x\r\n%s\r\n" % (65530, b"x" * 65530)

    async def answer(stream: trio.SocketStream) -> None:
        received = b""
        while b"\r\n\r\n" not in received:
            received += await stream.receive_some(65536)
        if not received.startswith(b"POST "):
            return  # the endpoint's sampler asking for /metrics: not this test's business
        sock = socket.socket(fileno=stream.socket.detach())
        with sock:
            data = HEAD + chunk * (total // len(chunk)) + END
            view = memoryview(data)
            while sent[0] < len(data):
                try:
                    sent[0] += sock.send(view[sent[0] :])
                except BlockingIOError:
                    blocked.set()
                    await trio.lowlevel.wait_writable(sock)
            done.set()

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    async with trio.open_nursery() as nursery:
        await nursery.start(trio.serve_listeners, answer, listeners)
        task_status.started(listeners[0].socket.getsockname()[1])


async def test_a_client_that_does_not_read_holds_the_lane_back(workers: int) -> None:
    """Backpressure: while the client reads nothing, the endpoint stops reading the lane
    (it buffers at most a read, beside the sockets' own buffers); then all arrives intact."""
    total = 64 * 1024 * 1024
    sent, blocked, done = [0], trio.Event(), trio.Event()
    async with trio.open_nursery() as nursery:
        lane = FakeLane("flood")
        lane.port = await nursery.start(_flooding_lane, total, sent, blocked, done)
        async with running_endpoint([], extra=[lane.info], workers=workers) as ep:
            talk = await Conversation.open(ep.url)
            async with talk.stream:
                await talk.stream.send_all(post(b'{"model":"m","stream":true}'))
                with trio.fail_after(10):
                    await blocked.wait()
                # Something that must not happen can only be waited for a while: an
                # endpoint that read ahead would take the whole stream in well under this.
                with trio.move_on_after(1.0):
                    await done.wait()
                held = sent[0]
                assert held < total // 2, f"the endpoint read {held} bytes ahead of its client"
                received = bytearray(talk.buf)
                with trio.fail_after(30):
                    while not done.is_set() or len(received) < sent[0]:
                        data = await talk.stream.receive_some(1 << 20)
                        assert data, "the endpoint closed the stream before its end"
                        received += data
        nursery.cancel_scope.cancel()
    # a verbatim client gets the lane's bytes as they came: head, chunks and last chunk
    assert len(received) == sent[0]
    assert received.startswith(HEAD)
    assert received.endswith(b"x\r\n" + END)


class _Steps(trio.abc.Instrument):
    """Counts the steps of the tasks that serve client connections."""

    def __init__(self) -> None:
        self.count = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        coro: Any = task.coro  # the handler's coroutine, then what it awaits, and so on
        while coro is not None:
            if getattr(coro, "cr_code", None) is _serve_connection.__code__:
                self.count += 1
                return
            coro = getattr(coro, "cr_await", None)


async def test_a_stream_does_not_wake_its_request_task_per_event() -> None:
    """The relay's point: the request's task sleeps while the events pass (one worker,
    served in this process, so its tasks can be counted)."""
    send, receive = trio.open_memory_channel[object](0)
    steps = _Steps()
    async with trio.open_nursery() as nursery:
        lane = FakeLane("stepped")
        lane.port = await nursery.start(_stepped_lane, receive)
        async with running_endpoint([], extra=[lane.info], workers=1) as ep:
            talk = await Conversation.open(ep.url)
            async with talk.stream:
                await talk.stream.send_all(post(b'{"model":"m","stream":true}'))
                await _receive_until(talk, b"\r\n\r\n")
                await send.send(event(0))
                assert await _receive_until(talk, b"\n\n\r\n") == event(0)
                trio.lowlevel.add_instrument(steps)
                try:
                    for n in range(1, 51):
                        await send.send(event(n))
                        assert await _receive_until(talk, b"\n\n\r\n") == event(n)
                finally:
                    trio.lowlevel.remove_instrument(steps)
                await send.send(END)
                assert await _receive_until(talk, END) == END
                await send.send(NEXT)
        nursery.cancel_scope.cancel()
    assert steps.count < 5, f"the request's task ran {steps.count} steps for 50 events"
