"""Raw non-blocking sockets for the endpoint's data path.

trio's ``SocketStream`` wraps every call in a checkpoint sandwich, a conflict detector
and a memoryview, and a proxied request makes four calls (read the request, write it to
the lane, read the answer, write it back): a good part of the per-request budget. A :class:`Wire` tries each call at once and waits in
``trio.lowlevel.wait_readable``/``wait_writable`` only when the kernel says it would
block, which is the same event-driven wait without the wrapping.

A call that succeeds at once does not yield to other tasks; that is fine here because
every proxied request waits for its lane at least once, and the client connection adds
a checkpoint where it could otherwise keep the CPU (see :mod:`._client`).
"""

from __future__ import annotations

import socket

import trio

RECEIVE_SIZE = 65536


class Wire:
    """One connected, non-blocking TCP socket; errors surface as :class:`OSError`.

    The method names follow trio's stream API.
    """

    __slots__ = ("fd", "sock")

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self.sock = sock
        self.fd = sock.fileno()

    @classmethod
    def from_stream(cls, stream: trio.SocketStream) -> Wire:
        """Take over the socket of a trio stream (the stream is unusable afterwards)."""
        return cls(socket.socket(fileno=stream.socket.detach()))

    async def receive_some(self, max_bytes: int = RECEIVE_SIZE) -> bytes:
        """The next bytes; ``b""`` at end of stream."""
        sock = self.sock
        while True:
            try:
                return sock.recv(max_bytes)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(sock)

    async def send_all(self, data: bytes) -> None:
        sock = self.sock
        try:
            sent = sock.send(data)
        except BlockingIOError:
            sent = 0
        if sent == len(data):
            return
        view = memoryview(data)
        while sent < len(view):
            await trio.lowlevel.wait_writable(sock)
            try:
                sent += sock.send(view[sent:])
            except BlockingIOError:
                continue

    async def send_eof(self) -> None:
        await trio.lowlevel.checkpoint()
        self.sock.shutdown(socket.SHUT_WR)

    def peer(self) -> str:
        """The client's address; ``""`` when it cannot be told (the peer is gone)."""
        try:
            address = self.sock.getpeername()
        except OSError:
            return ""
        return str(address[0]) if isinstance(address, tuple) else ""

    def close(self) -> None:
        """Close now; a task waiting on the socket gets ``trio.ClosedResourceError``."""
        if self.sock.fileno() >= 0:
            trio.lowlevel.notify_closing(self.sock)
            self.sock.close()
