"""``LineChannel.post``: a message written from the step that made it, in order with
everything sent or posted before (an agent's events)."""

from __future__ import annotations

import os
import socket

import pytest
import trio

from ddsup.channel._lines import LineChannel

LINE = "x" * 4000  # a few of these fill a socket buffer


def _pair() -> tuple[LineChannel[str], socket.socket]:
    """A channel and its peer, a plain socket: a test can look at it without a checkpoint,
    then read it with trio (:func:`_stream`)."""
    ours, theirs = socket.socketpair()
    stream = trio.SocketStream(trio.socket.from_stdlib_socket(ours))
    return LineChannel[str](stream, str.encode, bytes.decode), theirs


def _stream(peer: socket.socket) -> trio.SocketStream:
    return trio.SocketStream(trio.socket.from_stdlib_socket(peer))


async def _read_lines(stream: trio.SocketStream, count: int, buffer: bytes = b"") -> list[str]:
    lines: list[str] = []
    while len(lines) < count:
        chunk = await stream.receive_some(65536)
        assert chunk, "the channel closed early"
        buffer += chunk
        *whole, buffer = buffer.split(b"\n")
        lines += [line.decode() for line in whole]
    return lines


async def test_a_posted_message_is_on_the_wire_before_the_poster_yields() -> None:
    channel, theirs = _pair()
    assert channel.post(["ready lane@0"])
    # no checkpoint since the post: the bytes are in the peer's socket already
    assert theirs.recv(100, socket.MSG_DONTWAIT) == b"ready lane@0\n"
    await channel.aclose()
    theirs.close()


async def test_what_the_socket_does_not_take_is_flushed_in_order() -> None:
    channel, theirs = _pair()
    peer = _stream(theirs)
    posted: list[str] = []
    while True:  # nobody reads: the socket fills up and a post is left queued
        posted.append(f"{len(posted)} {LINE}")
        if not channel.post([posted[-1]]):
            break
    posted += ["after the full one", "and another"]
    assert not channel.post(posted[-2:])  # behind the queue, never around it
    with trio.fail_after(10):  # a flush that leaves bytes behind must fail, not hang
        async with trio.open_nursery() as nursery:
            nursery.start_soon(channel.flush)
            assert await _read_lines(peer, len(posted)) == posted
    await channel.aclose()
    await peer.aclose()


async def test_a_post_during_a_blocked_send_goes_after_it() -> None:
    channel, theirs = _pair()
    sent = [f"{i} {LINE}" for i in range(200)]  # more than the socket takes
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(channel.send_many, sent)
            await trio.testing.wait_all_tasks_blocked()  # the send waits for room
            head = theirs.recv(65536)  # room now, before the send's task runs again
            assert not channel.post(["posted meanwhile"])  # not written into that room
            peer = _stream(theirs)
            whole, _, rest = head.partition(b"\n")
            received = [whole.decode(), *await _read_lines(peer, len(sent), rest)]
    assert received == [*sent, "posted meanwhile"]
    await channel.aclose()
    await peer.aclose()


async def test_a_post_after_the_channel_closed_writes_nowhere() -> None:
    """Not into whatever file reuses the closed socket's descriptor number."""
    ours, theirs = trio.socket.socketpair()
    number = ours.fileno()
    channel = LineChannel[str](trio.SocketStream(ours), str.encode, bytes.decode)
    read_end, write_end = os.pipe()
    await channel.aclose()
    os.dup2(write_end, number)  # the socket's old number is now a pipe's
    try:
        assert not channel.post(["late event"])
        os.set_blocking(read_end, False)
        with pytest.raises(BlockingIOError):
            os.read(read_end, 100)
    finally:
        for fd in (read_end, write_end, number):
            os.close(fd)
        theirs.close()
