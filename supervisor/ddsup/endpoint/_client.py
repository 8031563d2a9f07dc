"""One client connection: httptools parses every request, the endpoint frames by hand.

Each request head is located here (its blank line; ``\\n`` line ends too, which RFC 9112
§2.2 lets a server accept: such a head is handed on with CRLF line ends) and handed
whole to httptools (llhttp, the C parser behind uvicorn, strict by default), and so is
its body: Content-Length, or chunked (:meth:`Client.read_body`; where a chunked body
ends is found from its framing lines, so that the parser gets exactly one request's
bytes). Answers are written as bytes, directly. HTTP/1.0 follows its keep-alive rules
(kept open only when asked, never sent a chunked body); ``Expect: 100-continue`` gets
its interim answer when the body is read; HEAD gets the head of the GET answer.

Refused, then the connection closed (:class:`ApiError` with ``close`` set): what llhttp
refuses (400: Content-Length with Transfer-Encoding or twice, folded or bare-CR header
lines, a bad chunk, …), a request line with more than one space between its parts or a
target that is not ASCII (400), HTTP/1.1 without exactly one Host header (400), a
Transfer-Encoding other than chunked (501), a head over ``max_header_bytes`` (431), an
HTTP version other than 1.0 and 1.1 (505), CONNECT (405: the endpoint tunnels nothing)
and a WebSocket handshake (400: no route speaks it). Any other ``Upgrade`` (``h2c``,
which ``curl --http2`` offers) is ignored, as RFC 9110 §7.8 allows: the request is
answered in HTTP/1.1 like one without it.

Timeouts: ``client_idle_timeout`` for the next request's first byte,
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

import time
from http import HTTPStatus

import trio

from ddsup.endpoint._api_errors import (
    ApiError,
    bad_request,
    header_too_large,
    request_timeout,
    too_large,
)
from ddsup.endpoint._body_budget import BodyAccount
from ddsup.endpoint._config import EndpointConfig
from ddsup.endpoint._connection import (
    CLOSE,
    LENGTH,
    Abort,
    ClientGone,
    Framing,
    Hangup,
    Request,
)
from ddsup.endpoint._deadlines import Expired, Timed
from ddsup.endpoint._head_fields import ChunkedEnd, RequestParser, head_end, refused
from ddsup.endpoint._wire import RECEIVE_SIZE, Wire

JSON = (b"content-type", b"application/json")
REASONS = {status.value: status.phrase.encode() for status in HTTPStatus}
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class HeadTimeout(Exception):
    """The client took too long with its next request (408 if it had begun, else a close)."""


class Client(Timed):
    """Reads requests from and writes responses to one accepted connection."""

    __slots__ = (
        "_body_unread",
        "_chunked",
        "_continue",
        "_head_only",
        "_http10",
        "_parsed",
        "_reframe",
        "_requests",
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
        self.hangup = Hangup()
        self.verbatim = True  # takes a lane's chunked body as it came (HTTP/1.1)
        self.last_upstream: object | None = None
        self._requests = RequestParser()
        self._body_unread = False
        self._parsed = False  # a request was parsed: the client waits for its answer
        self._started = False
        self._reframe = False
        self._chunked = False
        self._continue = False  # 100 Continue is owed before the body is read
        self._head_only = False  # HEAD: answers carry no body
        self._http10 = False

    async def read_head(self) -> Request | None:
        """The next request, ``None`` when the client is done.

        :class:`HeadTimeout` when the client is too slow (see the module docstring);
        :class:`ApiError` (with ``close``) for a request refused as it stands.
        """
        buf = self.buffer
        end = head_end(buf)
        if end < 0:
            buf, end = await self._more_head()
            if end < 0:
                return None
        else:
            await trio.lowlevel.checkpoint()  # pipelined: let other connections run first
        return self._parse(buf, end)

    async def _more_head(self) -> tuple[bytes, int]:
        """Read until the head is complete: (buffer, index after its end), or (…, -1) at EOF."""
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
                if buf.strip():
                    raise refused(400, "the connection ended in the middle of a request head")
                return buf, -1
            if not buf:
                self.deadline = time.monotonic() + config.client_header_timeout
            buf += data
            self.buffer = buf
            end = head_end(buf)
            if end >= 0:
                if not waited:
                    await trio.lowlevel.checkpoint()  # the client is ahead: others first
                return buf, end

    def _parse(self, buf: bytes, head_end: int) -> Request:
        config = self.config
        if head_end > config.max_header_bytes:
            raise header_too_large(config.max_header_bytes)
        try:
            method, target, http10 = self._requests.head(buf[:head_end])
        except ApiError:
            self._spent()
            raise
        fields = self._requests.fields
        self.buffer = buf[head_end:]
        self._parsed = True
        self._http10 = http10
        self.keep = fields.alive and not fields.close if http10 else not fields.close
        self.verbatim = not http10
        self._chunked = bool(fields.codings)
        self._body_unread = self._chunked or bool(fields.content_length)
        self._continue = fields.continue_expected and not http10
        self._head_only = method == b"HEAD"
        self._started = False
        forwarded = None if fields.listed else b"".join(fields.forwarded)
        return Request(method, target, fields.headers, fields.content_length, forwarded)

    def _spent(self) -> None:
        """The request is refused and the connection ends after the answer."""
        self.keep = False
        self._started = False
        self._head_only = False
        self._http10 = False

    async def read_body(self, request: Request, limit: int, account: BodyAccount) -> bytes:
        """The whole body, charged to ``account`` as it arrives; :class:`ApiError`
        413/408/400 on a limit, a timeout, an early end or a bad chunk; :class:`OverBudget`."""
        length = request.content_length or 0
        if length > limit:
            raise too_large(limit)
        if self._continue:
            self._continue = False
            self.out.append(CONTINUE)
            await self.flush()
        if self._chunked:
            return await self._read_chunked(limit, account)
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
        self._requests.body(body)  # ends the message in the parser, ready for the next
        self._body_unread = False
        return body

    async def _read_chunked(self, limit: int, account: BodyAccount) -> bytes:
        """A chunked body: its bytes fed to the parser as they arrive, up to where its
        framing lines say it ends, and its data charged as it is decoded; refused with 413
        as soon as its chunks declare more than ``limit`` bytes, before they arrive."""
        pieces = self._requests.fields.body
        ends = ChunkedEnd(limit)
        raw = self.buffer
        fed = taken = size = 0
        with trio.move_on_after(self.config.client_body_timeout):  # the whole body
            while True:
                end = ends.find(raw)
                upto = len(raw) if end < 0 else end
                self._requests.body(raw[fed:upto])
                fed = upto
                for piece in pieces[taken:]:
                    size += len(piece)
                    account.arrived(len(piece))
                taken = len(pieces)
                if size > limit:
                    raise too_large(limit)
                if end >= 0:
                    if not self._requests.fields.complete:
                        raise refused(400, "malformed chunked body")
                    account.complete()
                    self.buffer = raw[end:]
                    self._body_unread = False
                    return b"".join(pieces)
                data = await self.wire.receive_some()
                if not data:
                    self.eof = True
                    raise bad_request("the request ended before its body")
                done = ends.shift()  # fed and passed over: only a partial line is kept
                raw = raw[done:] + data
                fed -= done
        raise request_timeout("request body")

    def peer(self) -> str:
        return self.wire.peer()

    async def respond(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        """A complete response with a known length, sent in one write (a HEAD's without
        its body)."""
        parts = [b"HTTP/1.1 %d %s\r\n" % (status, REASONS.get(status, b""))]
        parts.extend(b"%s: %s\r\n" % pair for pair in headers)
        parts.append(b"content-length: %d\r\n" % len(body))
        if self._body_unread:
            self.linger_wanted = True  # the unread body makes reuse impossible
            self.keep = False
        parts.append(self._connection())
        parts.append(b"\r\n")
        if not self._head_only:
            parts.append(body)
        self._started = True
        self.out.append(b"".join(parts))
        await self.flush()

    def _connection(self) -> bytes:
        """The Connection header of an answer: what HTTP/1.0 needs to keep the connection."""
        if not self.keep:
            return b"connection: close\r\n"
        return b"connection: keep-alive\r\n" if self._http10 else b""

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
        if framing is not LENGTH:
            if self._http10:  # no chunked for HTTP/1.0: the body ends with the connection
                self.keep = False
            else:
                parts.append(b"transfer-encoding: chunked\r\n")
        parts.append(self._connection())
        parts.append(b"\r\n")
        self.out.append(b"".join(parts))
        self._started = True
        self._reframe = framing is CLOSE and not self._http10 and not self._head_only

    def pass_head(self, raw: bytes) -> None:
        if not self.keep:
            raw = raw[:-2] + b"connection: close\r\n\r\n"
        self.out.append(raw)
        self._started = True
        self._reframe = False

    def send_body(self, data: bytes) -> None:
        if self._head_only:
            return
        if self._reframe:
            data = b"%x\r\n%s\r\n" % (len(data), data)
        self.out.append(data)

    def relay(self, data: bytes) -> bool:
        # Once per stream event: one call and one send, no list in between.
        if self.out or self._reframe or self._head_only:
            self.send_body(data)
            return self.flush_now()
        try:
            sent = self.wire.sock.send(data)
        except OSError:  # would block, or the client left: flush() waits, or says so
            sent = 0
        if sent < len(data):
            self.out.append(data[sent:])
            return False
        return True

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
