"""Pooled HTTP/1.1 connections from the endpoint to one lane.

Opening a TCP connection per proxied request would double the endpoint's cost and put
TIME_WAIT pressure on the lanes, so each lane keeps a stack of idle keep-alive
connections. A connection goes back to the pool only when its response ended cleanly
at a message boundary; anything else (cancelled mid-request, truncated body) is closed.
Requests are written directly and responses parsed by :mod:`._http1`.

While a request of a fast-path client is forwarded, its connection also watches that
client for a hang-up, without a task of its own: the client's socket is added to a small
epoll set that holds this connection's socket (EPOLLRDHUP only: the peer's FIN or RST,
never its pipelined bytes), and the wait for the lane's bytes is a wait on that set.
One wait then wakes for either event; two ``epoll_ctl`` calls per request instead of a
watcher task's wake-ups (which had cost a quarter of a request's CPU).
"""

from __future__ import annotations

import contextlib
import errno
import select
from urllib.parse import urlsplit

import trio

from ddsup.endpoint._connection import ClientGone
from ddsup.endpoint._http1 import BodyDecoder, ProtocolError, ResponseHead, parse_head, split_head
from ddsup.endpoint._wire import RECEIVE_SIZE, Wire

_HANGUP = select.EPOLLRDHUP | select.EPOLLHUP | select.EPOLLERR


class UpstreamError(Exception):
    """The lane failed before answering; ``kind`` says how (refused, reset, timeout…)."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind


class UpstreamConnection:
    """One TCP connection to a lane, and the framing state of its current response."""

    __slots__ = ("_poller", "_watched", "buffer", "closed", "decoder", "reused", "wire")

    def __init__(self, wire: Wire) -> None:
        self.wire = wire
        self.buffer = b""
        self.decoder: BodyDecoder | None = None
        self.reused = False
        self.closed = False
        self._poller: select.epoll | None = None
        self._watched = -1

    def watch(self, client_fd: int | None) -> None:
        """While forwarding: a hang-up of ``client_fd`` ends the waits with ClientGone."""
        if client_fd is None:
            return
        poller = self._poller
        if poller is None:
            poller = self._poller = select.epoll()
            poller.register(self.wire.fd, select.EPOLLIN)
        poller.register(client_fd, _HANGUP)
        self._watched = client_fd

    def unwatch(self) -> None:
        if self._watched >= 0:
            assert self._poller is not None
            with contextlib.suppress(OSError):  # the client's socket is closed already
                self._poller.unregister(self._watched)
            self._watched = -1

    async def _readable(self) -> None:
        if self._watched < 0:
            await trio.lowlevel.wait_readable(self.wire.sock)
            return
        poller = self._poller
        assert poller is not None
        await trio.lowlevel.wait_readable(poller)
        for fd, _events in poller.poll(0):
            if fd == self._watched:
                raise ClientGone("the client hung up")

    def reusable(self) -> bool:
        decoder = self.decoder
        return (
            decoder is not None
            and decoder.done
            and decoder.reusable
            and not self.closed
            and not self.buffer
        )

    def close_now(self) -> None:
        """Close without awaiting: for use where no checkpoint may happen."""
        self.unwatch()
        self.wire.close()
        if self._poller is not None:
            self._poller.close()

    async def read_head(self) -> ResponseHead:
        """The response head (1xx skipped); :class:`UpstreamError` if the lane closes first."""
        while True:
            split = split_head(self.buffer)
            if split is None:
                await self.receive()
                if self.closed:
                    raise UpstreamError("reset", "the lane closed the connection before answering")
                continue
            head_bytes, self.buffer = split
            head = parse_head(head_bytes)
            if head.status >= 200:
                self.decoder = BodyDecoder(head)
                return head

    def buffered(self, verbatim: bool = False) -> bytes:
        """Body bytes already received (no I/O): decoded, or as they came when ``verbatim``
        (see :meth:`BodyDecoder.scan`); check ``decoder.done`` for the end."""
        data, self.buffer = self.buffer, b""
        decoder = self.decoder
        assert decoder is not None
        if not data:
            return b""
        return decoder.scan(data) if verbatim else decoder.feed(data)

    async def send(self, data: bytes) -> None:
        await self.wire.send_all(data)

    async def receive(self) -> None:
        """One read from the lane into the buffer; at EOF, check the body was complete."""
        sock = self.wire.sock
        while True:
            try:
                data = sock.recv(RECEIVE_SIZE)
                break
            except BlockingIOError:
                await self._readable()
        if data:
            self.buffer += data
            return
        self.closed = True
        if self.decoder is not None:
            self.decoder.eof()


def request_bytes(
    method: bytes, target: bytes, host: bytes, headers: list[tuple[bytes, bytes]], body: bytes
) -> bytes:
    """One HTTP/1.1 request; header names and values were already validated (by h11)."""
    parts = [b"%s %s HTTP/1.1\r\nhost: %s\r\n" % (method, target, host)]
    parts.extend(b"%s: %s\r\n" % pair for pair in headers)
    parts.append(b"content-length: %d\r\n\r\n" % len(body))
    parts.append(body)
    return b"".join(parts)


def _connect_failure(err: OSError) -> str:
    """``refused`` when every address refused; trio hides the errnos in ``__cause__``."""
    causes: list[BaseException] = list(getattr(err.__cause__, "exceptions", None) or [err])
    refused = all(isinstance(e, OSError) and e.errno == errno.ECONNREFUSED for e in causes)
    return "refused" if refused else "connect failed"


def _address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"lane URL {url!r} must look like http://host:port")
    return parts.hostname, parts.port or 80


class ConnectionPool:
    """Idle keep-alive connections to one lane (LIFO: the warmest one first)."""

    def __init__(self, url: str, max_idle: int) -> None:
        self.host, self.port = _address(url)
        netloc = self.host if ":" not in self.host else f"[{self.host}]"
        self.host_header = f"{netloc}:{self.port}".encode()
        self._idle: list[UpstreamConnection] = []
        self._max_idle = max_idle
        self._retired = False

    async def acquire(self, connect_timeout: float) -> UpstreamConnection:
        """An idle connection, or a new one; :class:`UpstreamError` when the lane is unreachable."""
        if self._idle:
            conn = self._idle.pop()
            conn.reused = True
            return conn
        return await self.connect(connect_timeout)

    async def connect(self, connect_timeout: float) -> UpstreamConnection:
        try:
            with trio.fail_after(connect_timeout):
                stream = await trio.open_tcp_stream(self.host, self.port)
        except trio.TooSlowError as err:
            raise UpstreamError("timeout", f"no connection within {connect_timeout:g} s") from err
        except OSError as err:
            raise UpstreamError(_connect_failure(err), str(err) or type(err).__name__) from err
        return UpstreamConnection(Wire.from_stream(stream))

    def release(self, conn: UpstreamConnection) -> None:
        """Keep ``conn`` for the next request when it is clean, else close it."""
        conn.unwatch()
        if self._retired or len(self._idle) >= self._max_idle or not conn.reusable():
            conn.close_now()
            return
        conn.decoder = None
        self._idle.append(conn)

    def close_idle(self, *, retire: bool) -> None:
        """Close idle connections; ``retire``: the lane left, close the others on release."""
        self._retired = self._retired or retire
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close_now()


async def fetch(pool: ConnectionPool, path: str, connect_timeout: float) -> tuple[int, bytes]:
    """``GET path`` on a pooled connection: (status, whole body). For small control reads."""
    conn = await pool.acquire(connect_timeout)
    try:
        request = b"GET %s HTTP/1.1\r\nhost: %s\r\n\r\n" % (path.encode(), pool.host_header)
        await conn.send(request)
        head = await conn.read_head()
        assert conn.decoder is not None
        body = [conn.buffered()]
        while not conn.decoder.done:
            await conn.receive()
            body.append(conn.buffered())
    except (OSError, ProtocolError) as err:
        conn.close_now()
        raise UpstreamError("reset", str(err)) from err
    except BaseException:
        conn.close_now()
        raise
    pool.release(conn)
    return head.status, b"".join(body)
