"""One client connection on the fast path: httptools parses, the endpoint frames by hand.

The common case is an HTTP/1.1 keep-alive client sending ``GET`` or ``POST`` with a
Content-Length body. For it, the request head is located here (``\\r\\n\\r\\n``), handed
whole to httptools (llhttp, the C parser behind uvicorn, strict by default: it rejects
what h11 rejects and more) and answered with bytes written directly: httptools parses a
typical head faster than a minimal regular-expression parser that checks less, and an
order of magnitude faster than h11.

Anything else raises :class:`Unusual` before a byte of the request is consumed, and the
connection continues on h11 (:mod:`._client`) with the bytes received so far: HTTP/1.0,
Transfer-Encoding, ``Expect``, ``Upgrade`` (and CONNECT, which llhttp reports as an
upgrade), a method other than GET and POST (HEAD included), a GET with a body, a head
without exactly one Host header (h11 refuses it, whichever the body's framing), a
non-ASCII target, a request line with more than one space between its parts (llhttp
takes it, h11 does not), bare LF line ends, and anything httptools refuses. So every
strict check h11 makes still decides the unusual cases, and the fast path only ever
accepts requests h11 accepts. Two refusals are made here, as
:class:`ApiError` with ``close`` set (answered, then the connection ends): a head over
``max_header_bytes`` (431: h11 only bounds a head it has not seen whole, so a 100 KB
head in one read passed a 64 KiB limit) and an HTTP version other than 1.0 and 1.1
(505: h11 would answer ``HTTP/9.9`` as if it were 1.0).

Timeouts are the h11 path's: ``client_idle_timeout`` for the next request's first byte,
``client_header_timeout`` from there to the end of its head, ``client_body_timeout`` for
the whole body (a total, not per read: a client sending a byte every few seconds is cut
off all the same). The head waits are :class:`Timed` (see :mod:`._deadlines`: no cancel
scope per request); a body that did not come with its head is read under a cancel scope. A
hang-up while the request is forwarded is noticed by the server's hang-up watch, which
interrupts the lane connection's wait (see :mod:`._hangups`): no reader task per
connection. After a response the next request is waited for before a read is tried
(that read would only fail: the client waits for its answer).
"""

from __future__ import annotations

import re
import time
from http import HTTPStatus

import httptools
import trio

from ddsup.endpoint._body_budget import BodyAccount
from ddsup.endpoint._config import EndpointConfig
from ddsup.endpoint._connection import Abort, ClientGone, Framing, Hangup, Request
from ddsup.endpoint._deadlines import Expired, Timed
from ddsup.endpoint._errors import (
    ApiError,
    bad_request,
    header_too_large,
    request_timeout,
    too_large,
    version_not_supported,
)
from ddsup.endpoint._head_fields import HeadFields
from ddsup.endpoint._wire import RECEIVE_SIZE, Wire

JSON = (b"content-type", b"application/json")
REASONS = {status.value: status.phrase.encode() for status in HTTPStatus}
# A request line that names an HTTP version, whatever the parser made of the rest.
_VERSIONED = re.compile(rb"[!-~]+ [^ \r\n]+ HTTP/([0-9]{1,3}\.[0-9]{1,3})\r?\n")


class Unusual(Exception):
    """The next request is not one for the fast path: h11 takes over the connection."""


class HeadTimeout(Exception):
    """The client took too long with its next request (408 if it had begun, else a close)."""


class FastClient(Timed):
    """Reads requests from and writes responses to one accepted connection (fast path)."""

    __slots__ = (
        "_body_unread",
        "_parsed",
        "_parser",
        "_proto",
        "_reframe",
        "_started",
        "buffer",
        "config",
        "eof",
        "hangup",
        "keep",
        "last_upstream",
        "linger_wanted",
        "out",
        "verbatim",
        "wire",
    )

    def __init__(self, wire: Wire, config: EndpointConfig) -> None:
        super().__init__()
        self.wire = wire
        self.config = config
        self.buffer = b""  # received, not yet consumed: the start of the next request
        self.eof = False
        self.out: list[bytes] = []
        self.keep = True  # the client wants the connection kept open
        self.linger_wanted = False
        self.hangup: Hangup | None = Hangup()
        self.verbatim = True
        self.last_upstream: object | None = None
        self._proto = HeadFields()
        self._parser = httptools.HttpRequestParser(self._proto)
        self._body_unread = False
        self._parsed = False  # a request was parsed: the client waits for its answer
        self._started = False
        self._reframe = False

    async def read_head(self) -> Request | None:
        """The next request, ``None`` when the client is done; :class:`Unusual` for h11.

        :class:`HeadTimeout` when the client is too slow (see the module docstring).
        """
        buf = self.buffer
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            buf, end = await self._more_head()
            if end < 0:
                return None
        else:
            await trio.lowlevel.checkpoint()  # pipelined: let other connections run first
        return self._parse(buf, end + 4)

    async def _more_head(self) -> tuple[bytes, int]:
        """Read until the head is complete: (buffer, index of its end), or (…, -1) at EOF."""
        config = self.config
        buf = self.buffer
        sock = self.wire.sock
        if buf:
            self.deadline = time.monotonic() + config.client_header_timeout
        waited = False
        if not buf and self._parsed:  # the next request comes later: wait
            self.deadline = time.monotonic() + config.client_idle_timeout
            waited = True
            try:
                await self.wait_readable(sock)
            except Expired:
                raise HeadTimeout from None
        while True:
            if buf.count(b"\n") != buf.count(b"\r\n"):
                raise Unusual  # bare LF line ends: h11 parses them (and bounds their size)
            if len(buf) > config.max_header_bytes:
                raise header_too_large(config.max_header_bytes)
            try:
                data = sock.recv(RECEIVE_SIZE)
            except BlockingIOError:
                if not buf:
                    self.deadline = time.monotonic() + config.client_idle_timeout
                waited = True
                try:
                    await self.wait_readable(sock)
                except Expired:
                    raise HeadTimeout from None
                continue
            except OSError:
                data = b""
            if not data:
                self.eof = True
                if buf:
                    raise Unusual  # a request cut short: h11 says what it says today
                return buf, -1
            if not buf:
                self.deadline = time.monotonic() + config.client_header_timeout
            buf += data
            self.buffer = buf
            end = buf.find(b"\r\n\r\n", max(0, len(buf) - len(data) - 3))
            if end >= 0:
                if not waited:
                    await trio.lowlevel.checkpoint()  # the client is ahead: others first
                return buf, end

    def _parse(self, buf: bytes, head_end: int) -> Request:
        if head_end > self.config.max_header_bytes:
            raise header_too_large(self.config.max_header_bytes)
        proto = self._proto
        proto.reset()
        parser = self._parser
        try:
            parser.feed_data(buf[:head_end])
        except httptools.HttpParserError as err:  # the parser is spent: h11 takes over
            _check_version(buf)
            raise Unusual from err
        except httptools.HttpParserUpgrade as err:  # CONNECT, or Connection: upgrade
            raise Unusual from err
        method = parser.get_method()
        length = proto.content_length
        if parser.get_http_version() != "1.1":
            _check_version(buf)
            raise Unusual  # HTTP/1.0: h11 knows its keep-alive rules
        # llhttp passed "METHOD SP+ target SP+ HTTP/1.1 CRLF": the target lies between (no
        # on_url callback, which cost a Python call per request). Extra spaces, which h11
        # refuses, leave a space in it: h11 answers.
        target = buf[len(method) + 1 : buf.find(b"\r\n") - 9]
        if (
            proto.odd
            or proto.hosts != 1
            or b" " in target
            or not target.isascii()
            or (method != b"POST" and (method != b"GET" or length))
        ):
            raise Unusual
        self.buffer = buf[head_end:]
        self._parsed = True
        self.keep = not proto.close  # HTTP/1.1: kept open unless the client says otherwise
        self._body_unread = bool(length)
        self._started = False
        forwarded = None if proto.listed else b"".join(proto.forwarded)
        return Request(method, target, proto.headers, length, forwarded)

    async def read_body(self, request: Request, limit: int, account: BodyAccount) -> bytes:
        """The whole body, charged to ``account`` as it arrives; :class:`ApiError`
        413/408/400 on a limit, a timeout or an early end; :class:`OverBudget`."""
        length = request.content_length or 0
        if length > limit:
            raise too_large(limit)
        buf = self.buffer
        if len(buf) < length:
            account.arrived(len(buf))
            chunks = [buf]
            have = len(buf)
            with trio.move_on_after(self.config.client_body_timeout):  # the whole body
                while have < length:
                    data = await self.wire.receive_some()
                    if not data:
                        self.eof = True
                        raise bad_request("the request ended before its body")
                    account.arrived(len(data))
                    chunks.append(data)
                    have += len(data)
            if have < length:
                raise request_timeout("request body")
            account.complete()
            buf = b"".join(chunks)
        elif length:
            account.whole(length)
        body, self.buffer = buf[:length], buf[length:]
        self._parser.feed_data(body)  # ends the message in the parser, ready for the next
        self._body_unread = False
        return body

    def peer(self) -> str:
        return self.wire.peer()

    def take_bodiless_end(self) -> None:
        """A fast-path GET has no body: nothing to take."""

    def watch(self, scope: trio.CancelScope | None) -> None:
        """Hang-ups are watched by the upstream connection through :attr:`hangup_fd`."""

    async def respond(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        """A complete response with a known length, sent in one write."""
        parts = [b"HTTP/1.1 %d %s\r\n" % (status, REASONS.get(status, b""))]
        parts.extend(b"%s: %s\r\n" % pair for pair in headers)
        parts.append(b"content-length: %d\r\n" % len(body))
        if self._body_unread:
            self.linger_wanted = True  # the unread body makes reuse impossible
            self.keep = False
        if not self.keep:
            parts.append(b"connection: close\r\n")
        parts += (b"\r\n", body)
        self._started = True
        self.out.append(b"".join(parts))
        await self.flush()

    async def reject(self, error: ApiError) -> None:
        if self._started:
            raise Abort from error
        if error.close:
            self.keep = False
        await self.respond(error.status, [JSON, *error.headers()], error.body())

    def start_response(
        self, status: int, reason: bytes, headers: list[tuple[bytes, bytes]], framing: Framing
    ) -> None:
        parts = [b"HTTP/1.1 %d %s\r\n" % (status, reason)]
        parts.extend(b"%s: %s\r\n" % pair for pair in headers)
        if framing is not Framing.LENGTH:
            parts.append(b"transfer-encoding: chunked\r\n")
        if not self.keep:
            parts.append(b"connection: close\r\n")
        parts.append(b"\r\n")
        self.out.append(b"".join(parts))
        self._started = True
        self._reframe = framing is Framing.CLOSE

    def pass_head(self, raw: bytes) -> None:
        if not self.keep:
            raw = raw[:-2] + b"connection: close\r\n\r\n"
        self.out.append(raw)
        self._started = True
        self._reframe = False

    def send_body(self, data: bytes) -> None:
        if self._reframe:
            data = b"%x\r\n%s\r\n" % (len(data), data)
        self.out.append(data)

    def end_response(self) -> None:
        if self._reframe:
            self.out.append(b"0\r\n\r\n")

    async def flush(self) -> None:
        if self.flush_now():  # nearly always whole: no coroutine for the send
            return
        data = self.out.pop()  # the rest, which the socket did not take
        try:
            await self.wire.send_all(data)
        except OSError as err:
            raise ClientGone from err

    def flush_now(self) -> bool:
        out = self.out
        if not out:
            return True
        data = out[0] if len(out) == 1 else b"".join(out)
        out.clear()
        try:
            sent = self.wire.sock.send(data)
        except OSError:  # would block, or the client left: flush() waits, or says so
            sent = 0
        if sent < len(data):
            out.append(data[sent:])
            return False
        return True

    @property
    def response_started(self) -> bool:
        return self._started

    def keep_alive(self) -> bool:
        return self.keep and not self._body_unread

    async def linger(self) -> None:
        """After an early answer, let the client read it before the socket goes away.

        Closing with unread request bytes makes the kernel send RST, which may destroy
        the response in flight; so half-close, then drain for a short bounded time.
        """
        if self.eof:
            return
        try:
            await self.wire.send_eof()
            with trio.move_on_after(1.0):
                drained = 0
                while drained < 4 * 1024 * 1024:
                    data = await self.wire.receive_some()
                    if not data:
                        return
                    drained += len(data)
        except OSError:
            return


def _check_version(buf: bytes) -> None:
    """505 when the request line names an HTTP version other than 1.0 and 1.1."""
    versioned = _VERSIONED.match(buf)
    if versioned is not None and versioned.group(1) not in (b"1.0", b"1.1"):
        raise version_not_supported(versioned.group(1).decode())
