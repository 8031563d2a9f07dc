"""Two bare Python proxies on trio: the floor of the endpoint's design, and of another.

``endpoint_compare.py`` runs them beside the endpoint and nginx, in front of the same
lanes, as ``floor proxy tasks`` and ``floor proxy epoll``. Neither admits, retries,
counts or times anything: they forward the bench's requests (HTTP/1.1 keep-alive, a
Content-Length body, parsed with httptools) to a lane and relay the answer's bytes
verbatim (Content-Length or chunked SSE) until its end. What they cost is what any
proxy built the same way must pay, before its first feature:

- **tasks**: the endpoint's shape. One trio task per client connection, a keep-alive
  lane connection of its own, non-blocking ``recv``/``send`` tried first and
  ``trio.lowlevel.wait_readable`` when they would block (two trio waits per plain
  request: the client's next request, the lane's answer).
- **epoll**: nginx's shape inside one trio task. Every client and lane socket is
  registered once, edge-triggered, in an epoll set of its own; the task waits for that
  set's descriptor with ``wait_readable`` and runs each ready socket's handler until its
  reads would block. Per request there is no trio task switch and no ``epoll_ctl``; one
  trio wait serves every socket that became ready meanwhile.

If the tasks floor alone costs more than a goal allows, no work inside the endpoint's
per-request code reaches that goal; the epoll floor says what a callback core would.
"""

from __future__ import annotations

import contextlib
import itertools
import select
import socket
from pathlib import Path
from typing import Any

RECEIVE = 65536


class _Head:
    """httptools' callbacks: the Content-Length of one request head."""

    def __init__(self) -> None:
        self.length = 0

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"content-length":
            self.length = int(value)


def _next_request(parser: Any, head: _Head, buf: bytes) -> int:
    """The length of the whole first request in ``buf``, or 0 while it is incomplete."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return 0
    head.length = 0
    parser.feed_data(buf[: end + 4])
    total = end + 4 + head.length
    if len(buf) < total:
        return 0
    parser.feed_data(buf[end + 4 : total])
    return total


class _Answer:
    """Where a lane's answer ends: its Content-Length, or the chunked stream's last chunk."""

    def __init__(self) -> None:
        self.head = b""
        self.left = -1  # body bytes still to come (Content-Length)
        self.chunked = False
        self.tail = b""

    def feed(self, data: bytes) -> bool:
        """Account for ``data``; True when the answer is complete."""
        if self.left < 0 and not self.chunked:
            self.head += data
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                return False
            lowered = self.head[:end].lower()
            data = self.head[end + 4 :]
            if b"transfer-encoding: chunked" in lowered:
                self.chunked = True
            else:
                at = lowered.find(b"content-length:") + len(b"content-length:")
                self.left = int(lowered[at : lowered.find(b"\r\n", at)])
        if self.chunked:
            self.tail = (self.tail + data)[-5:]
            done = self.tail == b"0\r\n\r\n"
        else:
            self.left -= len(data)
            done = self.left <= 0
        if done:
            self.head, self.left, self.chunked, self.tail = b"", -1, False, b""
        return done


def serve_tasks(port_file: str, lanes: list[str]) -> None:
    """The tasks floor (see the module docstring)."""
    import httptools
    import trio

    addresses = itertools.cycle([_address(lane) for lane in lanes])

    async def recv(sock: socket.socket) -> bytes:
        while True:
            try:
                return sock.recv(RECEIVE)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(sock)

    async def send(sock: socket.socket, data: bytes) -> None:
        while data:
            try:
                data = data[sock.send(data) :]
            except BlockingIOError:
                await trio.lowlevel.wait_writable(sock)

    async def handle(stream: trio.SocketStream) -> None:
        client = stream.socket._sock  # type: ignore[attr-defined]  # the stdlib socket
        connection = trio.socket.socket()
        lane = connection._sock  # type: ignore[attr-defined]
        head = _Head()
        parser = httptools.HttpRequestParser(head)
        answer = _Answer()
        buf = b""
        with connection, contextlib.suppress(OSError, trio.BrokenResourceError):
            await connection.connect(next(addresses))
            lane.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while True:
                size = _next_request(parser, head, buf)
                if not size:
                    await trio.lowlevel.wait_readable(client)  # after an answer: wait first
                    data = await recv(client)
                    if not data:
                        return
                    buf += data
                    continue
                await send(lane, buf[:size])
                buf = buf[size:]
                while True:
                    data = await recv(lane)
                    if not data:
                        return
                    await send(client, data)
                    if answer.feed(data):
                        break

    async def main() -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        await trio.Path(port_file).write_text(str(listeners[0].socket.getsockname()[1]))
        await trio.serve_listeners(handle, listeners)

    trio.run(main)


class _Pair:
    """One client connection and its lane connection, as the epoll floor drives them."""

    def __init__(self, client: socket.socket, lane: socket.socket, parser_type: Any) -> None:
        self.client = client
        self.lane = lane
        self.head = _Head()
        self.parser = parser_type(self.head)
        self.answer = _Answer()
        self.buf = b""
        self.busy = False  # a request is at the lane

    def client_ready(self) -> bool:
        """Read what the client sent; forward a request if none is in flight. False: closed."""
        while True:
            try:
                data = self.client.recv(RECEIVE)
            except BlockingIOError:
                break
            if not data:
                return False
            self.buf += data
        self._forward()
        return True

    def lane_ready(self) -> bool:
        """Relay what the lane sent; at an answer's end, forward the next request."""
        while True:
            try:
                data = self.lane.recv(RECEIVE)
            except BlockingIOError:
                return True
            if not data:
                return False
            self.client.sendall(data)  # the bench's answers fit a socket buffer
            if self.answer.feed(data):
                self.busy = False
                self._forward()

    def _forward(self) -> None:
        if self.busy:
            return
        size = _next_request(self.parser, self.head, self.buf)
        if size:
            self.lane.sendall(self.buf[:size])
            self.buf = self.buf[size:]
            self.busy = True


def serve_epoll(port_file: str, lanes: list[str]) -> None:
    """The epoll floor (see the module docstring)."""
    import httptools
    import trio

    addresses = itertools.cycle([_address(lane) for lane in lanes])
    listener = socket.create_server(("127.0.0.1", 0), backlog=1024)
    listener.setblocking(False)
    Path(port_file).write_text(str(listener.getsockname()[1]))
    ready = select.epoll()
    ready.register(listener.fileno(), select.EPOLLIN)
    handlers: dict[int, Any] = {}
    edge = select.EPOLLIN | select.EPOLLET | select.EPOLLRDHUP

    def close(pair: _Pair) -> None:
        for sock in (pair.client, pair.lane):
            handlers.pop(sock.fileno(), None)
            with contextlib.suppress(OSError):
                ready.unregister(sock.fileno())
            sock.close()

    def accept() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except BlockingIOError:
                return
            lane = socket.create_connection(next(addresses))  # loopback: at once
            for sock in (client, lane):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.setblocking(False)
            pair = _Pair(client, lane, httptools.HttpRequestParser)
            handlers[client.fileno()] = (pair.client_ready, pair)
            handlers[lane.fileno()] = (pair.lane_ready, pair)
            ready.register(client.fileno(), edge)
            ready.register(lane.fileno(), edge)

    async def main() -> None:
        with ready, listener:
            while True:
                await trio.lowlevel.wait_readable(ready.fileno())
                for fd, _ in ready.poll(0):
                    if fd == listener.fileno():
                        accept()
                        continue
                    handler = handlers.get(fd)
                    if handler is None:
                        continue
                    try:
                        alive = handler[0]()
                    except OSError:
                        alive = False
                    if not alive:
                        close(handler[1])

    trio.run(main)


def _address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)
