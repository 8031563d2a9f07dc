"""Streamed answers relayed event by event: as they come, intact, cut short when the lane
fails, and paced by a client that does not read.

The lane here writes each piece of its answer only when the test says so, so every
event arrives at the endpoint as a read of its own, while the request waits on the
lane. Each test states what a client sees.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio
from endpoint_fakes import FakeLane, running_endpoint
from test_endpoint_fast_path import Conversation, post

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


class _Streaming:
    """A stream in progress: the stepped lane's steps, the client's connection, the endpoint."""

    def __init__(self, steps: trio.MemorySendChannel[object], talk: Conversation, url: str):
        self.steps = steps
        self.talk = talk
        self.url = url

    async def ask(self, talk: Conversation | None = None) -> bytes:
        """Ask for a stream (on ``talk``, else the first connection); its response head."""
        talk = talk or self.talk
        await talk.stream.send_all(post(b'{"model":"m","stream":true}'))
        return await _receive_until(talk, b"\r\n\r\n")

    async def relayed(self, piece: bytes, mark: bytes = b"\n\n\r\n") -> bytes:
        """Have the lane send ``piece``; what the client received, up to ``mark``."""
        await self.steps.send(piece)
        return await _receive_until(self.talk, mark)


@asynccontextmanager
async def _streaming(workers: int, **config: object) -> AsyncIterator[_Streaming]:
    """The stepped lane behind an endpoint (``config``: its settings), and a client that
    asked it for a stream."""
    send, receive = trio.open_memory_channel[object](0)
    async with trio.open_nursery() as nursery:
        lane = FakeLane("stepped")
        lane.port = await nursery.start(_stepped_lane, receive)
        async with running_endpoint([], extra=[lane.info], workers=workers, **config) as ep:
            talk = await Conversation.open(ep.url)
            async with talk.stream:
                streaming = _Streaming(send, talk, ep.url)
                assert (await streaming.ask()).startswith(b"HTTP/1.1 200 ")
                yield streaming
        nursery.cancel_scope.cancel()


async def test_each_event_reaches_the_client_before_the_next_is_sent(workers: int) -> None:
    """Event by event, then the connection serves the next stream (kept alive, both sides)."""
    async with _streaming(workers) as streaming:
        for request in range(2):
            if request:
                assert (await streaming.ask()).startswith(b"HTTP/1.1 200 ")
            for n in range(5):
                assert await streaming.relayed(event(n)) == event(n)
            assert await streaming.relayed(END, END) == END
            await streaming.steps.send(NEXT)
            assert not streaming.talk.buf


async def test_a_stream_outlives_upstream_timeout_while_events_keep_coming(workers: int) -> None:
    """``upstream_timeout`` bounds a lane's silence, not its answer: a stream whose events
    keep coming goes on past it, whole (a long generation streams for minutes)."""
    timeout = 1.0
    async with _streaming(workers, upstream_timeout=timeout) as streaming:
        began, n = trio.current_time(), 0
        while trio.current_time() - began < 2.5 * timeout:
            await trio.sleep(timeout / 5)  # the lane's pace: well inside the timeout
            assert await streaming.relayed(event(n)) == event(n)
            n += 1
        assert await streaming.relayed(END, END) == END
        await streaming.steps.send(NEXT)


async def test_bad_bytes_mid_stream_cut_the_response_short(workers: int) -> None:
    """A lane that breaks its chunked framing mid-stream: the client's response ends
    without its last chunk (it must not look complete), and the endpoint serves on."""
    async with _streaming(workers) as streaming:
        assert await streaming.relayed(event(1)) == event(1)
        await streaming.steps.send(b"zz\r\nnot a chunk\r\n")
        assert await _received_all(streaming.talk) == b""  # closed, no last chunk
        await streaming.steps.send(RESET)  # the lane's connection is done with
        again = await Conversation.open(streaming.url)
        async with again.stream:
            await streaming.ask(again)
            await streaming.steps.send(event(2) + END)
            assert await _receive_until(again, END) == event(2) + END
            await streaming.steps.send(NEXT)


async def test_a_lane_reset_mid_stream_cuts_the_response_short(workers: int) -> None:
    async with _streaming(workers) as streaming:
        assert await streaming.relayed(event(1)) == event(1)
        await streaming.steps.send(RESET)
        assert await _received_all(streaming.talk) == b""  # closed, no last chunk


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
