"""The HTTP probe speaks one plain ``GET`` over a socket of its own (``http_status``):
what it answers for a 200, another status, a refused port, a name and a non-HTTP reply.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import trio

from ddsup.service._readiness import http_status


@asynccontextmanager
async def serving(reply: bytes) -> AsyncIterator[int]:
    """A loopback server that reads the request head and answers ``reply``; its port."""
    seen: list[bytes] = []

    async def answer(stream: trio.SocketStream) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = await stream.receive_some(4096)
            if not chunk:
                return
            head += chunk
        seen.append(head)
        await stream.send_all(reply)
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        serve = partial(trio.serve_tcp, answer, 0, host="127.0.0.1")
        [listener] = await nursery.start(serve)
        yield listener.socket.getsockname()[1]
        nursery.cancel_scope.cancel()
    assert all(h.startswith(b"GET /health HTTP/1.1\r\n") for h in seen), seen


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_a_200_and_another_status() -> None:
    async with serving(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n") as port:
        assert await http_status(f"http://127.0.0.1:{port}/health") == 200
    async with serving(b"HTTP/1.0 503 Service Unavailable\r\n\r\n") as port:
        assert await http_status(f"http://127.0.0.1:{port}/health") == 503


async def test_a_name_tries_each_of_its_addresses() -> None:
    """A name is resolved, and where it names ::1 first (nothing listens there) the next
    address is tried."""
    async with serving(b"HTTP/1.1 200 OK\r\n\r\n") as port:
        assert await http_status(f"http://localhost:{port}/health") == 200


async def test_a_refused_port_says_so() -> None:
    assert await http_status(f"http://127.0.0.1:{_closed_port()}/health") == "Connection refused"


async def test_a_reply_that_is_not_http() -> None:
    async with serving(b"SSH-2.0-OpenSSH\r\n") as port:
        assert await http_status(f"http://127.0.0.1:{port}/health") == "not an HTTP response"
