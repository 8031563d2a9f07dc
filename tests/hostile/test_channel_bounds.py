"""The control channel's server holds what any peer can make it do to a small, fixed cost.

One unauthenticated line (``[`` × 100000) must not end the controller, nor may a
connection make it buffer megabytes before authenticating, nor connections come without
a cap. Here a real server (``serve_channel``) on a loopback port takes
those inputs; after each one it still authenticates and serves a well-behaved peer.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from ddsup.channel import (
    Channel,
    ChannelError,
    Hello,
    Role,
    ServerLimits,
    connect_channel,
    decode,
    serve_channel,
)
from ddsup.channel._messages import MESSAGES, StatusRequest

SECRET = "the-secret"


async def _echo(channel: Channel, hello: Hello) -> None:
    """A handler that answers every message with the same message."""
    while (message := await channel.receive()) is not None:
        await channel.send(message)


@asynccontextmanager
async def _server(limits: ServerLimits | None = None) -> AsyncIterator[int]:
    limits = limits or ServerLimits()
    async with trio.open_nursery() as nursery:
        port: int = await nursery.start(
            lambda task_status: serve_channel(_echo, SECRET, limits=limits, task_status=task_status)
        )
        yield port
        nursery.cancel_scope.cancel()


async def _still_serves(port: int) -> None:
    """A peer with the secret is answered: the server survived what came before."""
    with trio.fail_after(5):
        channel = await connect_channel(f"127.0.0.1:{port}", Hello(Role.CONTROL, SECRET))
        await channel.send(StatusRequest())
        assert await channel.receive() == StatusRequest()
        await channel.aclose()


async def _raw(port: int, data: bytes) -> bytes:
    """Send ``data`` unauthenticated; what comes back before the server hangs up."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    with trio.fail_after(10):
        try:
            await stream.send_all(data)
            received = b""
            while chunk := await stream.receive_some(4096):
                received += chunk
        except trio.BrokenResourceError:
            received = b""  # reset by the server while we were still sending
    await stream.aclose()
    return received


# --- decode: the one reader of peers' lines ----------------------------------------------
def _nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
ops = st.sampled_from([kind.op for kind in MESSAGES])


@settings(max_examples=400, deadline=None, database=None)
@given(st.binary(max_size=300))
def test_decode_of_any_bytes_is_a_message_or_a_channel_error(line: bytes) -> None:
    with suppress(ChannelError):
        decode(line)


@settings(max_examples=600, deadline=None, database=None)
@given(ops, st.dictionaries(st.text(max_size=12), json_values, max_size=6), st.data())
def test_decode_of_any_object_with_a_known_op_is_a_message_or_a_channel_error(
    op: str, fields: dict[str, object], data: st.DataObject
) -> None:
    """Field names drawn from the message's own fields too, so values reach every parser."""
    kind = next(k for k in MESSAGES if k.op == op)
    names = [f for f in getattr(kind, "__dataclass_fields__", {}) if f != "op"]
    if names:
        for name in data.draw(st.lists(st.sampled_from(names), max_size=len(names))):
            fields[name] = data.draw(json_values)
    with suppress(ChannelError):
        decode(json.dumps({"op": op, **fields}).encode())


@pytest.mark.parametrize("depth", [100, 10_000, 100_000])
def test_deep_nesting_is_a_channel_error(depth: int) -> None:
    with pytest.raises(ChannelError):
        decode(_nested(depth))
    with pytest.raises(ChannelError):
        decode(b'{"op": "hello", "role": "agent", "secret": ' + _nested(depth) + b"}")


# --- the server ---------------------------------------------------------------------------
async def test_a_deeply_nested_hello_drops_only_that_connection() -> None:
    """``[`` × 100000 must not raise RecursionError and end the controller."""
    async with _server() as port:
        assert await _raw(port, b"[" * 100_000 + b"\n") == b""
        await _still_serves(port)


async def test_a_long_hello_is_cut_off_after_a_few_kilobytes() -> None:
    """Before authentication a line may hold 4 KiB, not 16 MiB."""
    async with _server() as port:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        sent = 0
        with trio.fail_after(10):
            try:
                while sent < 16 * 1024 * 1024:
                    await stream.send_all(b"x" * 65536)
                    sent += 65536
            except trio.BrokenResourceError:
                pass  # the server hung up
        await stream.aclose()
        assert sent < 1024 * 1024, f"the server took {sent} bytes of one unauthenticated line"
        await _still_serves(port)


async def test_a_silent_peer_is_dropped_after_the_hello_deadline() -> None:
    async with _server(ServerLimits(hello_timeout=0.5)) as port:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        with trio.fail_after(5):
            assert await stream.receive_some(10) == b""
        await stream.aclose()


async def test_a_slow_hello_is_held_to_one_deadline_not_one_per_byte() -> None:
    async with _server(ServerLimits(hello_timeout=0.5)) as port:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        with trio.fail_after(5):
            try:
                for _ in range(100):  # a byte every 100 ms: each read is quick, the line is not
                    await stream.send_all(b" ")
                    await trio.sleep(0.1)
                raise AssertionError("the server kept a slow hello for 10 s")
            except trio.BrokenResourceError:
                pass
        await stream.aclose()


async def test_idle_connections_beyond_the_cap_push_out_the_oldest() -> None:
    """A flood of idle connections cannot lock a real peer out: the oldest go first."""
    limits = ServerLimits(unauthenticated=4, hello_timeout=30)
    async with _server(limits) as port:
        idle = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(10)]
        await _still_serves(port)
        with trio.fail_after(5):
            for stream in idle[:6]:  # pushed out, oldest first, to make room
                assert await stream.receive_some(10) == b""
        for stream in idle:
            await stream.aclose()


async def test_authenticated_connections_are_capped() -> None:
    async with _server(ServerLimits(connections=2)) as port:
        hello = Hello(Role.CONTROL, SECRET)
        first = await connect_channel(f"127.0.0.1:{port}", hello)
        second = await connect_channel(f"127.0.0.1:{port}", hello)
        third = await connect_channel(f"127.0.0.1:{port}", hello)
        with trio.fail_after(5):
            assert await third.receive() is None  # refused
            await first.send(StatusRequest())
            assert await first.receive() == StatusRequest()
        for channel in (first, second, third):
            await channel.aclose()
        await _still_serves(port)


async def test_every_undecodable_line_after_the_hello_drops_that_connection() -> None:
    async with _server() as port:
        hello = Hello(Role.CONTROL, SECRET)
        for line in (
            b"[" * 100_000,
            b"\xff\xfe",
            b'{"op": "signal", "instances": [], "signum": 0}',
        ):
            channel = await connect_channel(f"127.0.0.1:{port}", hello)
            await channel._stream.send_all(line + b"\n")
            with trio.fail_after(5):
                assert await channel.receive() is None  # the server hung up
            await channel.aclose()
        await _still_serves(port)


# Runs a server with only 40 file descriptors allowed; prints its port, then serves.
_FD_STARVED_SERVER = textwrap.dedent(
    """
    import resource, sys, trio
    from ddsup.channel import serve_channel

    async def handler(channel, hello):
        while (message := await channel.receive()) is not None:
            await channel.send(message)

    async def main():
        async with trio.open_nursery() as nursery:
            port = await nursery.start(lambda task_status: serve_channel(
                handler, "the-secret", task_status=task_status))
            print(port, flush=True)
            await trio.sleep(float(sys.argv[1]))
            nursery.cancel_scope.cancel()

    resource.setrlimit(resource.RLIMIT_NOFILE, (40, 40))
    trio.run(main)
    """
)


def test_running_out_of_descriptors_backs_off_with_one_line_and_recovers() -> None:
    """EMFILE: the server logs one line (no traceback, not one per retry) and carries on."""
    server = subprocess.Popen(
        [sys.executable, "-c", _FD_STARVED_SERVER, "4"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        flood = [socket.create_connection(("127.0.0.1", port)) for _ in range(60)]
        assert server.stderr is not None
        first = server.stderr.readline().decode()  # blocks until the server says something
        assert "cannot accept control connections (EMFILE" in first, first
        for sock in flood:
            sock.close()
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            hello = {"op": "hello", "role": "control", "secret": SECRET}
            sock.sendall(json.dumps(hello).encode() + b"\n" + b'{"op": "status"}\n')
            assert sock.makefile("rb").readline() == b'{"op":"status"}\n'
        _out, err = server.communicate(timeout=15)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    text = first + err.decode()
    assert "Traceback" not in text, text
    warnings = [line for line in text.splitlines() if "cannot accept" in line]
    assert len(warnings) == 1, text  # one line, not one per retry
    assert server.returncode == 0, text
