"""What the routes and the proxy see of a client connection.

A connection is served by :class:`~ddsup.endpoint._client.Client` (httptools, raw socket
calls, upstream bytes relayed as they are); the routes and the proxy are written against
the :class:`ClientConnection` protocol it implements, and tests can stand in for it.
:class:`Request` is the request type.
"""

from __future__ import annotations

import enum
from typing import Protocol

from ddsup.endpoint._api_errors import ApiError
from ddsup.endpoint._body_budget import BodyAccount
from ddsup.endpoint._deadlines import Timed


class ClientGone(Exception):
    """The client closed or broke the connection; nothing more can be sent to it."""


class Abort(Exception):
    """Close the connection at once without another byte (a response was cut short)."""


class Hangup:
    """A client's hang-up, as the server's hang-up watch sees it (:mod:`._hangups`).

    ``gone`` once the client hung up; ``serving`` is the lane connection its request
    uses right now, whose waits a hang-up interrupts with :class:`ClientGone`.
    """

    __slots__ = ("gone", "serving")

    def __init__(self) -> None:
        self.gone = False
        self.serving: Timed | None = None

    def hung_up(self) -> None:
        self.gone = True
        serving = self.serving
        if serving is not None:
            serving.interrupt(ClientGone("the client hung up"))


class Framing(enum.Enum):
    """How a lane framed its response body, which decides how the client gets it."""

    LENGTH = "content-length"  # passed on as it is
    CHUNKED = "chunked"  # HTTP/1.1: the chunks as they are; HTTP/1.0: decoded, until close
    CLOSE = "until close"  # HTTP/1.1 gets it chunked (the end must be visible)


# The members as plain names, for the per-request code: on Python 3.11 a member read
# off the class goes through ``EnumType.__getattr__``, many times the cost of a global.
LENGTH = Framing.LENGTH
CHUNKED = Framing.CHUNKED
CLOSE = Framing.CLOSE


class Request:
    """One request head: method, target, headers (names lower-case), body length.

    A plain slotted class rather than a frozen dataclass: one is built per request on
    the hot path, and a frozen dataclass's ``__init__`` costs several times more.
    ``content_length`` is ``None`` when the request has no Content-Length header.
    ``forwarded`` is the block of header lines a lane gets (end-to-end headers but Host
    and Content-Length), when the parser built it on the way; else the proxy builds it.
    ``path`` is the target without its query string: read several times per request,
    it is cut once.
    """

    __slots__ = ("content_length", "forwarded", "headers", "method", "path", "target")

    def __init__(
        self,
        method: bytes,
        target: bytes,
        headers: list[tuple[bytes, bytes]],
        content_length: int | None,
        forwarded: bytes | None = None,
    ) -> None:
        self.method = method
        self.target = target
        self.headers = headers
        self.content_length = content_length
        self.forwarded = forwarded
        self.path = target if b"?" not in target else target[: target.index(b"?")]


class ClientConnection(Protocol):
    """One client connection, as the routes and the proxy use it.

    ``hangup`` is the state the server's hang-up watch keeps for the client (see
    :mod:`._hangups`). ``verbatim`` says the client takes a lane's chunked body as it
    came (HTTP/1.1; an HTTP/1.0 client gets it decoded).
    ``last_upstream`` lets the pool give a keep-alive client the same lane connection
    again (see :mod:`._upstream`).
    """

    hangup: Hangup
    verbatim: bool
    last_upstream: object | None  # the lane connection its last request used

    async def read_body(self, request: Request, limit: int, account: BodyAccount) -> bytes:
        """The whole body, its bytes charged to ``account`` as they arrive."""

    def peer(self) -> str:
        """The client's address (``""`` when the connection is gone)."""

    async def respond(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        """A complete response with a known length, sent at once."""

    async def reject(self, error: ApiError) -> None:
        """Answer ``error`` as JSON while that is still possible, else raise :class:`Abort`."""

    def start_response(
        self, status: int, reason: bytes, headers: list[tuple[bytes, bytes]], framing: Framing
    ) -> None:
        """Queue a lane's response head (end-to-end headers); raises ``ValueError`` when the
        head cannot be passed on, before anything is queued."""

    def pass_head(self, raw: bytes) -> None:
        """Queue a lane's response head as it came (``verbatim`` clients only); its headers
        are end-to-end and its body framing is Content-Length or chunked."""

    def send_body(self, data: bytes) -> None:
        """Queue body bytes: decoded, or the raw chunks when ``verbatim``."""

    def relay(self, data: bytes) -> bool:
        """Send body bytes (as :meth:`send_body` frames them) without waiting, straight
        to the socket when nothing is queued: True when all went, as :meth:`flush_now`."""

    def end_response(self) -> None:
        """Queue the end of the response body."""

    async def flush(self) -> None:
        """Send everything queued; :class:`ClientGone` when the client has left."""

    def flush_now(self) -> bool:
        """Send what is queued without waiting: True when all of it went (else the rest
        stays queued for :meth:`flush`, which also reports a client that has left)."""

    @property
    def response_started(self) -> bool: ...
