"""Pooled HTTP/1.1 connections from the endpoint to one lane.

Opening a TCP connection per proxied request would double the endpoint's cost and put
TIME_WAIT pressure on the lanes, so each lane keeps a stack of idle keep-alive
connections. A connection goes back to the pool only when its response ended cleanly
at a message boundary; anything else (cancelled mid-request, truncated body) is closed.
Requests are written directly and responses parsed by :mod:`._http1`.

While a client's request is forwarded, a hang-up of that client ends the
connection's waits with :class:`ClientGone` (:mod:`._hangups`); its waits are plain
waits on its own socket. The response head is waited for before the first read is
tried: a lane never answers before the request's task has yielded, so that read would
only fail (one system call and one exception per request).
"""

from __future__ import annotations

import errno
import logging
from urllib.parse import urlsplit

import trio

from ddsup.endpoint._connection import Hangup
from ddsup.endpoint._deadlines import Deadlines, Timed
from ddsup.endpoint._http1 import BodyDecoder, ProtocolError, ResponseHead, parse_head, split_head
from ddsup.endpoint._wire import RECEIVE_SIZE, Wire

log = logging.getLogger("ddsup.endpoint")


class UpstreamError(Exception):
    """The lane failed before answering; ``kind`` says how (refused, reset, timeout…)."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind


class UpstreamConnection(Timed):
    """One TCP connection to a lane, and the framing state of its current response.

    Its waits are :class:`Timed`: while a request uses it, it is in that server's
    :class:`Deadlines` (:meth:`checkout`), and the proxy sets :attr:`deadline`.
    """

    __slots__ = ("_deadlines", "_hangup", "buffer", "closed", "decoder", "reused", "wire")

    def __init__(self, wire: Wire) -> None:
        super().__init__()
        self._deadlines: Deadlines | None = None
        self._hangup: Hangup | None = None
        self.wire = wire
        self.buffer = b""
        self.decoder: BodyDecoder | None = None
        self.reused = False
        self.closed = False

    def checkout(self, deadlines: Deadlines, hangup: Hangup | None) -> None:
        """A request uses the connection: time its waits, and (with a ``hangup``) end them
        with :class:`~ddsup.endpoint._connection.ClientGone` when that client hangs up."""
        self._deadlines = deadlines
        deadlines.add(self)
        if hangup is not None:
            self._hangup = hangup
            hangup.serving = self
            if hangup.gone:
                hangup.hung_up()

    def checkin(self) -> None:
        """The request is done with the connection (kept or closed).

        A hang-up that came after the connection's last wait (the answer was in) leaves
        it clean: the next user of the connection must not get that client's hang-up.
        """
        self.interrupted = None
        if self._deadlines is not None:
            self._deadlines.discard(self)
            self._deadlines = None
        hangup = self._hangup
        if hangup is not None:
            if hangup.serving is self:
                hangup.serving = None
            self._hangup = None

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
        self.checkin()
        self.wire.close()

    async def read_head(self) -> ResponseHead:
        """The response head (1xx skipped); :class:`UpstreamError` if the lane closes first."""
        while True:
            split = split_head(self.buffer)
            if split is None:
                if self.buffer:  # a head in pieces: its next one may be in already
                    await self.receive()
                else:  # nothing yet: the wait comes first (one coroutine less per request)
                    self.buffer = await self.next_bytes()
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
        sock = self.wire.sock
        try:
            sent = sock.send(data)
        except BlockingIOError:
            sent = 0
        view = memoryview(data)
        while sent < len(view):  # a body larger than the socket's buffer: timed waits
            await self.wait_writable(sock)
            try:
                sent += sock.send(view[sent:])
            except BlockingIOError:
                continue

    async def receive(self) -> None:
        """One read from the lane into the buffer; at EOF, check the body was complete.

        The waits end with ``ClientGone`` when the client being served hangs up (see
        :meth:`checkout`).
        """
        sock = self.wire.sock
        while True:
            try:
                data = sock.recv(RECEIVE_SIZE)
                break
            except BlockingIOError:
                await self.wait_readable(sock)
        if data:
            self.buffer += data
            return
        self.closed = True
        if self.decoder is not None:
            self.decoder.eof()

    async def next_bytes(self) -> bytes:
        """The lane's next bytes, waited for before the read is tried (the buffer is
        empty and nothing is expected yet: a response head, a stream's next event);
        ``b""`` at EOF, once the body is checked to be complete.

        The wait is :meth:`Timed.wait_readable`'s, written out here: this runs once per
        response, and a coroutine less each time is CPU kept (the relay loop writes the
        same wait out for each read of a stream: keep the two alike).
        """
        sock = self.wire.sock
        while True:
            self.raise_interruption()
            self.waiting_on = sock
            try:
                await trio.lowlevel.wait_readable(sock)
            except trio.ClosedResourceError:
                self.raise_interruption()
                raise
            finally:
                self.waiting_on = None
            try:
                data = sock.recv(RECEIVE_SIZE)
            except BlockingIOError:
                continue
            if not data:
                self.at_eof()
            return data

    def at_eof(self) -> None:
        """The lane closed the connection: check the body was complete."""
        self.closed = True
        if self.decoder is not None:
            self.decoder.eof()


def request_bytes(
    method: bytes, target: bytes, host: bytes, headers: bytes, body: bytes, auth: bytes = b""
) -> bytes:
    """One HTTP/1.1 request; ``headers`` are header lines, validated by the client's parser,
    and ``auth`` the lane's own ``authorization`` line (or nothing)."""
    return b"%s %s HTTP/1.1\r\nhost: %s\r\n%s%scontent-length: %d\r\n\r\n%s" % (
        method,
        target,
        host,
        headers,
        auth,
        len(body),
        body,
    )


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
    """Idle keep-alive connections to one lane (LIFO: the warmest one first).

    ``auth`` is the header line that carries the lane's own key, when it has one: every
    request to the lane sends it (the endpoint never forwards a client's key).
    """

    def __init__(self, url: str, max_idle: int, api_key: str | None = None) -> None:
        self.host, self.port = _address(url)
        netloc = self.host if ":" not in self.host else f"[{self.host}]"
        self.host_header = f"{netloc}:{self.port}".encode()
        self.auth = b""
        if api_key and api_key.isprintable() and api_key.isascii() and " " not in api_key:
            self.auth = b"authorization: Bearer %s\r\n" % api_key.encode()
        elif api_key:  # it would break the header: the lane will say 401, which is visible
            log.warning("lane %s: its API key is not a token (spaces or controls); not sent", url)
        self._idle: dict[UpstreamConnection, None] = {}  # insertion order: LIFO
        self._max_idle = max_idle
        self._retired = False

    async def acquire(
        self, connect_timeout: float, prefer: object | None = None
    ) -> UpstreamConnection:
        """``prefer`` if it is idle here, else the warmest idle connection, else a new one;
        :class:`UpstreamError` when the lane is unreachable."""
        idle = self._idle
        if idle:
            if prefer is not None and prefer in idle:
                assert isinstance(prefer, UpstreamConnection)
                del idle[prefer]
                conn = prefer
            else:
                conn, _ = idle.popitem()
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
        conn.checkin()
        if self._retired or len(self._idle) >= self._max_idle or not conn.reusable():
            conn.close_now()
            return
        conn.decoder = None
        self._idle[conn] = None

    def close_idle(self, *, retire: bool) -> None:
        """Close idle connections; ``retire``: the lane left, close the others on release."""
        self._retired = self._retired or retire
        idle, self._idle = self._idle, {}
        for conn in idle:
            conn.close_now()


async def fetch(pool: ConnectionPool, path: str, connect_timeout: float) -> tuple[int, bytes]:
    """``GET path`` on a pooled connection: (status, whole body). For small control reads.

    A kept connection that the lane closed meanwhile (vLLM's server closes one idle for
    5 s) is replaced by a new one once, as the proxy does: a GET is safe to send again.
    """
    request = b"GET %s HTTP/1.1\r\nhost: %s\r\n%s\r\n" % (
        path.encode(),
        pool.host_header,
        pool.auth,
    )
    conn = await pool.acquire(connect_timeout)
    for last in (False, True):
        try:
            await conn.send(request)
            head = await conn.read_head()
            assert conn.decoder is not None
            body = [conn.buffered()]
            while not conn.decoder.done:
                await conn.receive()
                body.append(conn.buffered())
        except (OSError, ProtocolError, UpstreamError) as err:
            conn.close_now()
            if last or not conn.reused:
                if isinstance(err, UpstreamError):
                    raise
                raise UpstreamError("reset", str(err)) from err
            conn = await pool.connect(connect_timeout)
            continue
        except BaseException:
            conn.close_now()
            raise
        pool.release(conn)
        return head.status, b"".join(body)
    raise AssertionError("unreachable")  # pragma: no cover
