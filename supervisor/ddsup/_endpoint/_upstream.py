"""Pooled HTTP/1.1 connections from the endpoint to one lane, spoken with h11.

Opening a TCP connection per proxied request would double the endpoint's cost and put
TIME_WAIT pressure on the lanes, so each lane keeps a stack of idle keep-alive
connections. A connection goes back to the pool only when both sides finished their
message cleanly; anything else (cancelled mid-request, truncated body) is closed.
"""

from __future__ import annotations

import errno
from urllib.parse import urlsplit

import h11
import trio

RECEIVE_SIZE = 65536


class UpstreamError(Exception):
    """The lane failed before answering; ``kind`` says how (refused, reset, timeout…).

    ``fresh`` is false when the failure came on a reused keep-alive connection that the
    lane may simply have closed while idle: the caller then tries a new connection to
    the same lane before counting it as a failed attempt.
    """

    def __init__(self, kind: str, detail: str, *, fresh: bool = True) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.fresh = fresh


class UpstreamConnection:
    """One TCP connection to a lane and its h11 client state."""

    __slots__ = ("h11", "reused", "stream")

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.h11 = h11.Connection(h11.CLIENT)
        self.reused = False

    def reusable(self) -> bool:
        conn = self.h11
        return conn.our_state is h11.DONE and conn.their_state is h11.DONE

    def close_now(self) -> None:
        """Close without awaiting: for use where no checkpoint may happen."""
        self.stream.socket.close()

    async def receive_event(self) -> h11.Event:
        """The next event from the lane, reading from the socket as h11 needs."""
        while True:
            event = self.h11.next_event()
            if isinstance(event, h11.Event):
                return event
            if event is h11.PAUSED:  # only after a complete response; never while awaiting one
                raise UpstreamError("reset", "the lane's connection is out of step")
            data = await self.stream.receive_some(RECEIVE_SIZE)
            self.h11.receive_data(data)


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
        return UpstreamConnection(stream)

    def release(self, conn: UpstreamConnection) -> None:
        """Keep ``conn`` for the next request when it is clean, else close it."""
        if self._retired or len(self._idle) >= self._max_idle or not conn.reusable():
            conn.close_now()
            return
        try:
            conn.h11.start_next_cycle()
        except h11.LocalProtocolError:
            conn.close_now()
            return
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
        request = h11.Request(method="GET", target=path, headers=[(b"host", pool.host_header)])
        await conn.stream.send_all(conn.h11.send(request) + conn.h11.send(h11.EndOfMessage()))
        status = 0
        body: list[bytes] = []
        while True:
            event = await conn.receive_event()
            if isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                body.append(event.data)
            elif isinstance(event, h11.EndOfMessage):
                break
            elif not isinstance(event, h11.InformationalResponse):
                raise UpstreamError("reset", "the lane closed the connection mid-answer")
    except (trio.BrokenResourceError, OSError, h11.ProtocolError) as err:
        conn.close_now()
        raise UpstreamError("reset", str(err)) from err
    except BaseException:
        conn.close_now()
        raise
    pool.release(conn)
    return status, b"".join(body)
