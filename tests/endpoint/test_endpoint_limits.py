"""Connections: at most ``max_connections`` open, and running out of descriptors survived.

Shown with one worker, in this process (the cap and the descriptor limit are each
process's own), over real sockets.
"""

from __future__ import annotations

import contextlib
import logging
import resource
import socket
from collections.abc import Iterator

import pytest
import trio
from endpoint_fakes import FakeLane, http_client, running_endpoint

from ddsup.endpoint import _accept, _server


async def get_health(port: int) -> bytes:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        received = b""
        while chunk := await stream.receive_some(65536):
            received += chunk
    return received


async def test_connections_past_the_cap_wait_their_turn() -> None:
    lane = FakeLane("a")
    async with running_endpoint([lane], max_connections=2) as ep:
        port = int(ep.url.rsplit(":", 1)[1])
        first = await trio.open_tcp_stream("127.0.0.1", port)
        second = await trio.open_tcp_stream("127.0.0.1", port)
        async with trio.open_nursery() as nursery:
            answer: list[bytes] = []
            answered = trio.Event()

            async def third() -> None:
                answer.append(await get_health(port))
                answered.set()

            nursery.start_soon(third)
            with trio.move_on_after(0.5):  # two open connections: the third is not served
                await answered.wait()
            assert not answer
            await first.aclose()  # a place frees up
            with trio.fail_after(5):
                await answered.wait()
        await second.aclose()
    assert answer[0].startswith(b"HTTP/1.1 200 ")


def test_the_descriptor_limit_is_raised_and_bounds_the_cap(
    caplog: pytest.LogCaptureFixture,
) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, hard), hard))
        assert _accept.raise_fd_limit() == hard
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == hard
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert _accept.connection_cap(100, 1024) == 100
    with caplog.at_level(logging.WARNING):
        assert _accept.connection_cap(8192, 1024) == (1024 - _accept.RESERVED_FDS) // 2
    assert "max_connections 8192 needs more file descriptors" in caplog.text


@contextlib.contextmanager
def descriptor_limit(spare: int) -> Iterator[None]:
    """This process may open only ``spare`` more descriptors while the block runs."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with socket.socket() as probe:
        in_use = probe.fileno() + 1  # descriptors are handed out lowest first: a fair count
    resource.setrlimit(resource.RLIMIT_NOFILE, (in_use + spare, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def test_out_of_descriptors_the_endpoint_backs_off_with_one_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """EMFILE on accept: one warning, no traceback, and service resumes when fds free up."""
    monkeypatch.setattr(_server, "raise_fd_limit", lambda: 1 << 20)  # keep the test's limit
    lane = FakeLane("a")
    clients: list[socket.socket] = []
    async with running_endpoint([lane]) as ep, http_client() as client:
        port = int(ep.url.rsplit(":", 1)[1])
        with descriptor_limit(40), caplog.at_level(logging.INFO, logger="ddsup.endpoint"):
            try:
                while True:  # connect until this process (the endpoint's too) has no fd left
                    sock = socket.socket()
                    clients.append(sock)
                    sock.setblocking(False)
                    with contextlib.suppress(BlockingIOError):
                        sock.connect(("127.0.0.1", port))
            except OSError:
                pass
            with trio.move_on_after(1.0):  # the endpoint meets EMFILE and backs off meanwhile
                while "cannot accept connections" not in caplog.text:  # noqa: ASYNC110
                    await trio.sleep(0.02)  # bounded poll: no event for a log line
            for sock in clients:
                sock.close()
        clients.clear()
        with trio.fail_after(10):
            response = await client.get(f"{ep.url}/health")
        assert response.status_code == 200
    warnings = [r for r in caplog.records if "cannot accept connections" in r.getMessage()]
    assert len(warnings) == 1
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
