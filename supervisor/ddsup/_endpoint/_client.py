"""One client connection of the endpoint: h11 server state plus the limits we own.

h11 parses and frames HTTP/1.1; everything h11 leaves to its user lives here: reading
with deadlines (slowloris protection: a request head must arrive within
``client_header_timeout`` of its first byte, an idle keep-alive connection is closed
after ``client_idle_timeout``), the body size limit, batching writes into one
``send_all`` per flush, and noticing a client that hangs up while its request is still
being served.
"""

from __future__ import annotations

import h11
import trio

from ddsup._endpoint._config import EndpointConfig
from ddsup._endpoint._errors import ApiError, bad_request, request_timeout, too_large

RECEIVE_SIZE = 65536
JSON = (b"content-type", b"application/json")


class ClientGone(Exception):
    """The client closed or broke the connection; nothing more can be sent to it."""


class Abort(Exception):
    """Close the connection at once without another byte (a response was cut short)."""


class Client:
    """Reads requests from and writes responses to one accepted connection."""

    __slots__ = ("config", "conn", "disconnected", "out", "stream")

    def __init__(self, stream: trio.SocketStream, config: EndpointConfig) -> None:
        self.stream = stream
        self.config = config
        self.conn = h11.Connection(h11.SERVER, max_incomplete_event_size=config.max_header_bytes)
        self.out: list[bytes] = []
        self.disconnected = False

    async def _receive(self, deadline: float) -> bytes | None:
        """Bytes from the client, ``b""`` at EOF, ``None`` when ``deadline`` passed."""
        with trio.move_on_at(deadline):
            try:
                return await self.stream.receive_some(RECEIVE_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as err:
                raise ClientGone from err
        return None

    async def read_head(self) -> h11.Request | None:
        """The next request's head, or ``None`` when the client is done with the connection."""
        conn = self.conn
        started = bool(conn.trailing_data[0])
        now = trio.current_time()
        deadline = now + (
            self.config.client_header_timeout if started else self.config.client_idle_timeout
        )
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as err:
                await self.reject(
                    ApiError(err.error_status_hint, "invalid_request_error", str(err))
                )
                return None
            if isinstance(event, h11.Request):
                return event
            if event is not h11.NEED_DATA:
                return None  # ConnectionClosed (or PAUSED, which a finished cycle never is)
            data = await self._receive(deadline)
            if data is None:
                if started:
                    await self.reject(request_timeout("request head"))
                return None
            if not started and data:
                started = True
                deadline = trio.current_time() + self.config.client_header_timeout
            conn.receive_data(data)

    async def read_body(self, request: h11.Request, limit: int) -> bytes:
        """The whole request body; :class:`ApiError` 413/408/400 on a limit or a bad frame."""
        length = _content_length(request)
        if length is not None and length > limit:
            raise too_large(limit)
        conn = self.conn
        if conn.they_are_waiting_for_100_continue:
            self.write(h11.InformationalResponse(status_code=100, headers=[]))
            await self.flush()
        chunks: list[bytes] = []
        size = 0
        timeout = self.config.client_body_timeout
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as err:
                raise bad_request(f"malformed request body: {err}") from err
            if isinstance(event, h11.Data):
                size += len(event.data)
                if size > limit:
                    raise too_large(limit)
                chunks.append(event.data)
            elif isinstance(event, h11.EndOfMessage):
                return b"".join(chunks)
            elif event is h11.NEED_DATA:
                data = await self._receive(trio.current_time() + timeout)
                if data is None:
                    raise request_timeout("request body")
                conn.receive_data(data)
            else:
                raise bad_request("the request ended before its body")

    def write(self, event: h11.Event) -> None:
        """Queue ``event``'s bytes; :meth:`flush` sends everything queued in one call."""
        data = self.conn.send(event)
        if data:
            self.out.append(data)

    async def flush(self) -> None:
        if not self.out:
            return
        data = b"".join(self.out) if len(self.out) > 1 else self.out[0]
        self.out.clear()
        try:
            await self.stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as err:
            raise ClientGone from err

    async def respond(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        """A complete response with a known length, sent in one write."""
        headers = [*headers, (b"content-length", str(len(body)).encode())]
        if self.conn.their_state is not h11.DONE:
            headers.append((b"connection", b"close"))  # the unread body makes reuse impossible
        self.write(h11.Response(status_code=status, headers=headers))
        if body:
            self.write(h11.Data(data=body))
        self.write(h11.EndOfMessage())
        await self.flush()

    async def reject(self, error: ApiError) -> None:
        """Answer ``error`` as JSON, when a response can still be sent at all."""
        if self.conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            raise Abort from error
        await self.respond(error.status, [JSON, *error.headers()], error.body())

    @property
    def response_started(self) -> bool:
        return self.conn.our_state is not h11.SEND_RESPONSE

    def keep_alive(self) -> bool:
        conn = self.conn
        return conn.our_state is h11.DONE and conn.their_state is h11.DONE

    async def watch(self, cancel_scope: trio.CancelScope) -> None:
        """Cancel ``cancel_scope`` if the client hangs up while its request is served.

        Bytes that arrive instead (a pipelined next request) go to h11's buffer and the
        watch ends: the next cycle will read them.
        """
        try:
            data = await self.stream.receive_some(RECEIVE_SIZE)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            data = b""
        if data:
            self.conn.receive_data(data)
            return
        self.disconnected = True
        cancel_scope.cancel()

    async def linger(self) -> None:
        """After an early answer, let the client read it before the socket goes away.

        Closing with unread request bytes makes the kernel send RST, which may destroy
        our response in flight; so half-close, then drain for a short bounded time.
        """
        try:
            await self.stream.send_eof()
            with trio.move_on_after(1.0):
                drained = 0
                while drained < 4 * 1024 * 1024:
                    data = await self.stream.receive_some(RECEIVE_SIZE)
                    if not data:
                        return
                    drained += len(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            return


def _content_length(request: h11.Request) -> int | None:
    for name, value in request.headers:
        if name == b"content-length":
            return int(value)  # h11 validated it is a number
    return None
