"""The controller's side of the control channel: accept, bound, authenticate, hand over.

Anyone who can reach the port can connect, so nothing a peer sends before it has
authenticated may cost the run more than a small, fixed amount, and nothing any peer
sends may end it:

- **the hello is small and quick**: its line may hold :attr:`ServerLimits.hello_bytes`
  and must arrive within :attr:`ServerLimits.hello_timeout` of the connection;
- **unauthenticated connections are few**: at most :attr:`ServerLimits.unauthenticated`
  at once; a new one pushes out the oldest (a real peer says hello within
  milliseconds, so a flood of idle connections cannot lock agents out);
- **authenticated connections are capped** (:attr:`ServerLimits.connections`);
- **a failed accept backs off** (``EMFILE`` when file descriptors run out): one log
  line a minute at most, never a traceback, and the server carries on;
- **any line that does not decode drops that connection**, and only that one.
"""

from __future__ import annotations

import errno
import hmac
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import trio

from ddsup.channel._channel import Channel
from ddsup.channel._messages import MAX_LINE, ChannelError, Hello

log = logging.getLogger("ddsup.channel")

ACCEPT_BACKOFF = 0.1  # seconds between accepts while the process is out of descriptors
WARN_EVERY = 60.0  # seconds between two warnings about failing accepts

Handler = Callable[[Channel, Hello], Awaitable[None]]


async def open_listener(host: str) -> trio.SocketListener:
    """A listener on ``host`` (its first address) at a port the kernel picks."""
    listeners = await trio.open_tcp_listeners(0, host=host)
    for other in listeners[1:]:
        await other.aclose()
    return listeners[0]


@dataclass(frozen=True)
class ServerLimits:
    """What the server allows; the defaults fit a run of thousands of agents."""

    hello_bytes: int = 4096  # a hello is ~200 bytes: role, secret, node name, pid
    hello_timeout: float = 5.0
    unauthenticated: int = 64
    connections: int = 4096


class _Gate:
    """Who may hold a connection now: the newest unauthenticated ones, and the capped rest."""

    def __init__(self, limits: ServerLimits) -> None:
        self.limits = limits
        self.waiting: dict[int, trio.CancelScope] = {}  # insertion order: oldest first
        self.authenticated = 0
        self._next = 0

    def wait_for_hello(self, scope: trio.CancelScope) -> int:
        """Admit one unauthenticated connection, pushing out the oldest when full."""
        while len(self.waiting) >= self.limits.unauthenticated:
            oldest = next(iter(self.waiting))
            self.waiting.pop(oldest).cancel()
        self._next += 1
        self.waiting[self._next] = scope
        return self._next


async def serve_channel(
    handler: Handler,
    secret: str,
    *,
    host: str = "127.0.0.1",
    limits: ServerLimits = ServerLimits(),
    listener: trio.SocketListener | None = None,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Accept authenticated connections on ``host`` and run ``handler(channel, hello)``.

    Listens on one address (``host`` is resolved to its first), on a port the kernel
    picks, which ``task_status`` reports; or on ``listener``, bound before (``ddsup
    start`` binds it before it launches its agents: connections wait in its backlog until
    this serves them), which this then owns and closes.
    """
    if listener is None:
        listener = await open_listener(host)
    gate = _Gate(limits)
    connection = _Connection(handler, secret.encode(), gate)
    async with listener, trio.open_nursery() as nursery:
        task_status.started(listener.socket.getsockname()[1])
        accepting = _Acceptor(listener)
        while True:
            stream = await accepting.next()
            nursery.start_soon(connection.serve, stream)


@dataclass
class _Connection:
    """One accepted connection of the control socket, served by ``serve`` under the gate's limits."""

    handler: Handler
    secret: bytes
    gate: _Gate

    async def serve(self, stream: trio.SocketStream) -> None:
        """One connection: its hello within the limits, then the handler until it ends."""
        limits = self.gate.limits
        channel = Channel(stream, max_line=limits.hello_bytes)
        try:
            hello = await self._hello(channel)
            if hello is None or not hmac.compare_digest(hello.secret.encode(), self.secret):
                return
            if self.gate.authenticated >= limits.connections:
                log.warning("refused a control connection: %d are open", limits.connections)
                return
            channel.max_line = MAX_LINE
            self.gate.authenticated += 1
            try:
                await self.handler(channel, hello)
            finally:
                self.gate.authenticated -= 1
        except (ChannelError, trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # a peer that broke the protocol or went away: only this connection ends
        finally:
            await channel.aclose()

    async def _hello(self, channel: Channel) -> Hello | None:
        """The first line if it is a hello, in time and not pushed out; else None."""
        with trio.move_on_after(self.gate.limits.hello_timeout) as scope:
            ticket = self.gate.wait_for_hello(scope)
            try:
                first = await channel.receive()
            finally:
                self.gate.waiting.pop(ticket, None)
            return first if isinstance(first, Hello) else None
        return None


class _Acceptor:
    """``listener.accept`` that outlasts running out of file descriptors (or memory)."""

    def __init__(self, listener: trio.SocketListener) -> None:
        self._listener = listener
        self._warned_at = -math.inf

    async def next(self) -> trio.SocketStream:
        while True:
            try:
                return await self._listener.accept()
            except OSError as err:
                self._warn(err)
            # No event says that descriptors came free: a bounded backoff, then retry.
            await trio.sleep(ACCEPT_BACKOFF)

    def _warn(self, err: OSError) -> None:
        now = trio.current_time()
        if now - self._warned_at < WARN_EVERY:
            return
        self._warned_at = now
        name = errno.errorcode.get(err.errno or 0, "error")
        log.warning(
            "cannot accept control connections (%s: %s); retrying every %gs",
            name,
            err.strerror,
            ACCEPT_BACKOFF,
        )
