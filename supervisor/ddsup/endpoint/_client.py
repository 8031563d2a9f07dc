"""One client connection on the h11 path: h11 server state plus the limits we own.

A connection starts on the fast path (:mod:`._fast_client`) and comes here for good
once a request is unusual (another HTTP version, chunked, ``Expect``, a malformed head,
…): h11 then judges it strictly, exactly as it judged every request before the fast
path existed, starting from the bytes the fast path received but did not consume.

h11 parses and frames HTTP/1.1; everything h11 leaves to its user lives here: reading
with deadlines (slowloris protection: a request head must arrive within
``client_header_timeout`` of its first byte, a body within ``client_body_timeout`` in
all, an idle keep-alive connection is closed after ``client_idle_timeout``), the body
size limit, batching writes into one ``send_all`` per flush, and noticing a client that
hangs up while its request is served. Some requests h11 takes are refused here, and the
connection closed after the answer: an HTTP version other than 1.0 and 1.1
(505), Content-Length together with Transfer-Encoding (400: the shape of request
smuggling, which a proxy in front might frame differently), a head over
``max_header_bytes`` that arrived whole (431; h11 bounds only an incomplete one),
CONNECT (405: the endpoint tunnels nothing) and a WebSocket handshake (400: no route
speaks it). Any other ``Upgrade`` (``h2c``, which ``curl --http2`` offers) is ignored,
as RFC 9110 §7.8 allows: the request is answered in HTTP/1.1 like one without it, and
h11 takes that answer as the offer declined. A HEAD request gets the GET answer's head,
without the body.

One reader task per connection does every read (:meth:`Client.run_reader`). It reads
only when asked: when a request is being parsed, or while a request is forwarded, so
that a hang-up (EOF) cancels the forwarding at once. A task per connection rather than
a watcher task per request: keep-alive clients then pay for it once (it measured as a
quarter of the per-request CPU cost), and reads stay bounded (one read at a time).
"""

from __future__ import annotations

import contextlib
import logging
import re
from http import HTTPStatus

import h11
import trio

from ddsup.endpoint._body_budget import BodyAccount
from ddsup.endpoint._config import EndpointConfig
from ddsup.endpoint._connection import Abort, ClientGone, Framing, Hangup, Request
from ddsup.endpoint._errors import (
    ApiError,
    ambiguous_framing,
    bad_request,
    header_too_large,
    request_timeout,
    too_large,
    tunnel_refused,
    version_not_supported,
    websocket_refused,
)
from ddsup.endpoint._notices import NOTICES
from ddsup.endpoint._wire import RECEIVE_SIZE, Wire

JSON = (b"content-type", b"application/json")
# h11's states in which the client's request is whole; an offer to switch protocols (h2c)
# is declined by any answer but 101. (h11 documents MIGHT_SWITCH_PROTOCOL but leaves it
# out of its __all__.)
_REQUEST_WHOLE = (h11.DONE, h11.MIGHT_SWITCH_PROTOCOL)  # type: ignore[attr-defined]
_SIZE_LINE = re.compile(rb"([0-9A-Fa-f]+)[^\r\n]*\r\n")  # a chunk's size, then any extension
REASONS = {status.value: status.phrase.encode() for status in HTTPStatus}


class Client:
    """Reads requests from and writes responses to one connection (h11 path)."""

    __slots__ = (
        "_arrived",
        "_head_only",
        "_want",
        "_watch",
        "config",
        "conn",
        "disconnected",
        "eof",
        "last_upstream",
        "linger_wanted",
        "out",
        "stream",
    )

    hangup: Hangup | None = None  # hang-ups are watched here (:meth:`watch`), not upstream
    verbatim = False  # h11 frames body data itself: the proxy hands it decoded bytes

    def __init__(
        self, stream: Wire, config: EndpointConfig, received: bytes = b"", eof: bool = False
    ) -> None:
        """``received``: bytes read but not consumed before h11 took over; ``eof``: the
        client already closed its side."""
        self.stream = stream
        self.config = config
        self.conn = h11.Connection(h11.SERVER, max_incomplete_event_size=config.max_header_bytes)
        self.out: list[bytes] = []
        self.disconnected = False  # hung up while a request was being served
        self.eof = eof
        self.last_upstream: object | None = None
        self.linger_wanted = False
        self._want = trio.Event()  # set: the reader should read once more
        self._arrived = trio.Event()  # set: the reader delivered bytes or EOF
        self._watch: trio.CancelScope | None = None
        self._head_only = False  # the request is HEAD: answers carry no body
        if received:
            self.conn.receive_data(received)
        if eof:
            self.conn.receive_data(b"")

    async def run_reader(self) -> None:
        """Read whenever asked, feed h11, and cancel a watched request on hang-up."""
        if self.eof:
            return
        while True:
            await self._want.wait()
            try:
                data = await self.stream.receive_some(RECEIVE_SIZE)
            except (OSError, trio.ClosedResourceError):
                data = b""
            self._want = trio.Event()
            if not data:
                self.eof = True
                self.conn.receive_data(b"")
                if self._watch is not None:
                    self.disconnected = True
                    self._watch.cancel()
                self._arrived.set()
                return
            self.conn.receive_data(data)
            self._arrived.set()

    async def _more(self, deadline: float) -> bool:
        """Wait until the reader delivered more bytes (or EOF); ``False`` at ``deadline``."""
        if self.eof:
            return True  # h11 already knows; its next event says so
        self._arrived = trio.Event()
        self._want.set()
        with trio.move_on_at(deadline):
            await self._arrived.wait()
            return True
        return False

    def watch(self, scope: trio.CancelScope | None) -> None:
        """Let the client hanging up cancel ``scope`` (``None``: stop); see :meth:`run_reader`.

        A plain method rather than a context manager: it runs on every request.
        """
        self._watch = scope
        if scope is not None and not self.eof and not self.conn.trailing_data[0]:
            self._want.set()  # nothing pipelined is waiting: listen for EOF meanwhile

    async def read_head(self) -> Request | None:
        """The next request's head, or ``None`` when the client is done with the connection."""
        conn = self.conn
        started = bool(conn.trailing_data[0])
        config = self.config
        timeout = config.client_header_timeout if started else config.client_idle_timeout
        deadline = trio.current_time() + timeout
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as err:
                status = err.error_status_hint
                await self.reject(ApiError(status, "invalid_request_error", str(err)))
                self.linger_wanted = True
                return None
            if isinstance(event, h11.Request):
                self._head_only = event.method == b"HEAD"
                headers = list(event.headers)
                refusal = _refusal(event, headers, config.max_header_bytes)
                if refusal is not None:
                    await self.reject(refusal)
                    self.linger_wanted = True
                    return None
                return Request(event.method, event.target, headers, _content_length(headers))
            if event is not h11.NEED_DATA:
                return None  # ConnectionClosed (or PAUSED, which a finished cycle never is)
            if not await self._more(deadline):
                if started or conn.trailing_data[0]:
                    await self.reject(request_timeout("request head"))
                    self.linger_wanted = True
                return None
            if not started:
                started = True
                deadline = trio.current_time() + config.client_header_timeout

    async def read_body(self, request: Request, limit: int, account: BodyAccount) -> bytes:
        """The whole request body, charged to ``account`` as it arrives; :class:`ApiError`
        413/408/400 on a limit or a bad frame; :class:`OverBudget`.

        A chunked body is refused once its bytes pass ``limit``, and at once when its
        first chunk's size line declares more (a client that streams a body of known
        length sends it as one chunk): like a Content-Length over it, none of it is read.
        That line is looked for in h11's buffer only before h11 has taken any of the body,
        when the buffer holds at most one read besides an incomplete line: a look for
        every chunk's line would copy the buffer once per chunk.
        """
        length = request.content_length
        if length is not None and length > limit:
            raise too_large(limit)
        conn = self.conn
        if conn.they_are_waiting_for_100_continue:
            self.write(h11.InformationalResponse(status_code=100, headers=[]))
            await self.flush()
        chunks: list[bytes] = []
        size = 0
        first_line = length is None and any(n == b"transfer-encoding" for n, _ in request.headers)
        deadline = trio.current_time() + self.config.client_body_timeout  # the whole body
        while True:
            if first_line and (line := _SIZE_LINE.match(conn.trailing_data[0])) is not None:
                if int(line[1], 16) > limit:
                    raise too_large(limit)
                first_line = False
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as err:
                raise bad_request(f"malformed request body: {err}") from err
            if isinstance(event, h11.Data):
                size += len(event.data)
                if size > limit:
                    raise too_large(limit)
                account.arrived(len(event.data))
                chunks.append(event.data)
                first_line = False
            elif isinstance(event, h11.EndOfMessage):
                account.complete()
                return b"".join(chunks)
            elif event is h11.NEED_DATA:
                if not await self._more(deadline):
                    raise request_timeout("request body")
            else:
                raise bad_request("the request ended before its body")

    def peer(self) -> str:
        return self.stream.peer()

    def write(self, event: h11.Event) -> None:
        """Queue ``event``'s bytes; :meth:`flush` sends everything queued in one call."""
        data = self.conn.send(event)
        if data:
            self.out.append(data)

    def flush_now(self) -> bool:
        """The h11 path sends only by awaiting (:meth:`flush`): True when nothing is queued."""
        return not self.out

    async def flush(self) -> None:
        if not self.out:
            return
        data = b"".join(self.out) if len(self.out) > 1 else self.out[0]
        self.out.clear()
        try:
            await self.stream.send_all(data)
        except (OSError, trio.ClosedResourceError) as err:
            raise ClientGone from err

    async def respond(
        self, status: int, headers: list[tuple[bytes, bytes]], body: bytes, *, close: bool = False
    ) -> None:
        """A complete response with a known length, sent in one write (a HEAD's without
        its body); ``close``: the connection ends after it."""
        headers = [*headers, (b"content-length", str(len(body)).encode())]
        if close or self.conn.their_state not in _REQUEST_WHOLE:
            headers.append((b"connection", b"close"))  # the unread body makes reuse impossible
            self.linger_wanted = True
        self.write(
            h11.Response(status_code=status, headers=headers, reason=REASONS.get(status, b""))
        )
        if body and not self._head_only:
            self.write(h11.Data(data=body))
        self.write(h11.EndOfMessage())
        await self.flush()

    def take_bodiless_end(self) -> None:
        """Take a GET's end (h11's queued ``EndOfMessage``) before answering it.

        Without this, h11 still expects the (empty) body when the answer goes out, and
        every answer to a GET would close its keep-alive connection. A GET that does
        carry body bytes is not drained: its answer closes the connection, as before.
        Nothing is read from the socket here.
        """
        if self.conn.their_state is h11.SEND_BODY:
            with contextlib.suppress(h11.RemoteProtocolError):
                self.conn.next_event()

    async def reject(self, error: ApiError) -> None:
        """Answer ``error`` as JSON, when a response can still be sent at all."""
        if self.conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            raise Abort from error
        await self.respond(error.status, [JSON, *error.headers()], error.body(), close=error.close)

    def start_response(
        self, status: int, reason: bytes, headers: list[tuple[bytes, bytes]], framing: Framing
    ) -> None:
        """h11 validates the head and frames the body (chunked when not length-framed)."""
        try:
            response = h11.Response(status_code=status, headers=headers, reason=reason)
        except h11.ProtocolError as err:
            raise ValueError(str(err)) from err
        self.write(response)

    def pass_head(self, raw: bytes) -> None:
        raise AssertionError("an h11 client frames every head itself (verbatim is False)")

    def send_body(self, data: bytes) -> None:
        self.write(h11.Data(data=data))

    def end_response(self) -> None:
        self.write(h11.EndOfMessage())

    @property
    def response_started(self) -> bool:
        return self.conn.our_state is not h11.SEND_RESPONSE

    def keep_alive(self) -> bool:
        conn = self.conn
        return conn.our_state is h11.DONE and conn.their_state is h11.DONE

    async def linger(self) -> None:
        """After an early answer, let the client read it before the socket goes away.

        Closing with unread request bytes makes the kernel send RST, which may destroy
        our response in flight; so half-close, then drain for a short bounded time.
        Call it only once the reader task has ended.
        """
        if self.eof:
            return
        try:
            await self.stream.send_eof()
            with trio.move_on_after(1.0):
                drained = 0
                while drained < 4 * 1024 * 1024:
                    data = await self.stream.receive_some(RECEIVE_SIZE)
                    if not data:
                        return
                    drained += len(data)
        except (trio.ClosedResourceError, OSError):
            return


def _content_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    for name, value in headers:
        if name == b"content-length":
            return int(value)  # h11 validated it is a number
    return None


def _refusal(event: h11.Request, headers: list[tuple[bytes, bytes]], limit: int) -> ApiError | None:
    """Why a request h11 took is refused all the same (see the module docstring), if it is."""
    if event.http_version not in (b"1.0", b"1.1"):
        return version_not_supported(event.http_version.decode())
    names = {name for name, _ in headers}
    if b"content-length" in names and b"transfer-encoding" in names:
        return ambiguous_framing()
    size = len(event.method) + len(event.target) + 12  # the request line, as h11 read it
    size += sum(len(name) + len(value) + 4 for name, value in headers)
    if size > limit:
        return header_too_large(limit)
    if event.method == b"CONNECT":
        NOTICES.note("connect", logging.INFO, "refused a CONNECT request (405): no tunnels")
        return tunnel_refused()
    if any(name == b"upgrade" and _names_websocket(value) for name, value in headers):
        NOTICES.note("websocket", logging.INFO, "refused a WebSocket handshake (400)")
        return websocket_refused()
    return None


def _names_websocket(upgrade: bytes) -> bool:
    """Whether an Upgrade header offers WebSocket (``websocket``, or ``websocket/13``)."""
    return any(
        offer.split(b"/", 1)[0].strip().lower() == b"websocket" for offer in upgrade.split(b",")
    )
