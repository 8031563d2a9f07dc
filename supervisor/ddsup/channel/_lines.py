"""One connection of newline-framed messages, in a codec of the caller's choice (trio).

The control channel (``_channel``: every message, the controller's side and the endpoint's
lane feed), a node agent's connection (``_agent_channel``: an agent's messages only) and
the endpoint's link to its workers (``endpoint._worker_link``) are each this framing with
their own codec; :func:`connect_lines` opens one to ``host:port`` and says hello on it,
over :func:`connect_tcp` (which readiness probes use too).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import trio

from ddsup.channel._hello import MAX_LINE, ChannelError

RECEIVE_SIZE = 65536

M = TypeVar("M")


class LineChannel(Generic[M]):
    """One connection of newline-framed messages in a codec of the caller's choice.

    ``send`` is safe from several tasks (it takes a lock), and so is :meth:`post` from
    synchronous code: every message goes out in the order it was sent or posted.
    :class:`Channel` is the control channel's codec; the endpoint's link to its workers
    uses its own on the same framing. ``max_line`` bounds what one line may hold, and so
    what a peer can make this side buffer; the control channel's server lowers it until
    the peer has authenticated.
    """

    def __init__(
        self,
        stream: trio.abc.Stream,
        encoder: Callable[[M], bytes],
        decoder: Callable[[bytes], M],
        *,
        max_line: int = MAX_LINE,
    ) -> None:
        self._stream = stream
        self._encode = encoder
        self._decode = decoder
        self._buffer = bytearray()
        self._scanned = 0  # no newline in _buffer[:_scanned]: each byte is searched once
        self._send_lock = trio.Lock()
        self._unsent = bytearray()  # posted or sent, not written yet: always goes first
        self._socket = stream.socket if isinstance(stream, trio.SocketStream) else None
        self.max_line = max_line

    async def send(self, message: M) -> None:
        await self.send_many([message])

    async def send_many(self, messages: list[M]) -> None:
        """``messages`` in order, in one write: what queued while the last write waited
        costs one system call, not one each. They are queued when called, in call order
        with posts: cancelled while an earlier write waits, they still go with the next."""
        self._unsent += b"".join(self._encode(message) + b"\n" for message in messages)
        await self.flush()

    def post(self, messages: list[M]) -> bool:
        """Queue ``messages`` behind everything sent or posted before and, when no write
        is under way, write them now, from the caller's own step: True when all of it went.
        Else the rest stays queued, and :meth:`flush` (or any later send) must send it.

        Why not a writer task: between the step that stamps an agent's event and the
        writer's turn the agent can lose its CPU, and many agents on few CPUs take turns
        of hundreds of milliseconds: a start's ready events would reach the endpoint late.
        """
        self._unsent += b"".join(self._encode(message) + b"\n" for message in messages)
        # the descriptor now, not one kept: once closed, its number may be another file's
        fd = -1 if self._socket is None else self._socket.fileno()
        if fd < 0 or self._send_lock.locked():
            return False
        try:
            written = os.write(fd, self._unsent)  # non-blocking: trio's sockets are
        except OSError:  # full (BlockingIOError), or broken: flush waits, or reports it
            return False
        del self._unsent[:written]
        return not self._unsent

    async def flush(self) -> None:
        """Write everything queued, in order (BrokenResourceError: the peer is gone)."""
        async with self._send_lock:
            while self._unsent:
                data = bytes(self._unsent)
                self._unsent.clear()
                await self._stream.send_all(data)

    async def receive(self) -> M | None:
        """The next message, or None at a clean end of stream; ChannelError otherwise."""
        while True:
            line = self._buffered_line()
            if line is not None:
                return self._decode(line)
            try:
                chunk = await self._stream.receive_some(RECEIVE_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as err:
                raise ChannelError(f"connection lost: {err}") from err
            if not chunk:
                if self._buffer:
                    raise ChannelError("connection closed mid-message")
                return None
            self._buffer += chunk

    def receive_buffered(self) -> M | None:
        """The next message if the last reads brought all of it, else None: no wait, no
        read. A reader that applies a backlog at once uses it (the endpoint's lane feed:
        one table rebuild for every change that queued while it rebuilt)."""
        line = self._buffered_line()
        return None if line is None else self._decode(line)

    def _buffered_line(self) -> bytes | None:
        newline = self._buffer.find(b"\n", self._scanned)
        if newline > self.max_line or (newline < 0 and len(self._buffer) > self.max_line):
            raise ChannelError(f"message longer than {self.max_line} bytes")
        if newline < 0:
            self._scanned = len(self._buffer)
            return None
        line = bytes(self._buffer[:newline])
        del self._buffer[: newline + 1]
        self._scanned = 0
        return line

    async def aclose(self) -> None:
        with trio.move_on_after(1) as scope:
            scope.shield = True
            await self._stream.aclose()


C = TypeVar("C", bound=LineChannel[Any])


async def connect_lines(address: str, hello: Any, make: Callable[[trio.abc.Stream], C]) -> C:
    """Connect to ``host:port``, frame the stream with ``make`` and send ``hello`` (which
    its codec writes) on it; raises ChannelError when unreachable."""
    host, _, port = address.rpartition(":")
    try:
        stream = trio.SocketStream(await connect_tcp(host.strip("[]"), int(port)))
    except (OSError, ValueError) as err:
        raise ChannelError(f"cannot reach the ddsup controller at {address}: {err}") from err
    channel = make(stream)
    try:
        await channel.send(hello)
    except (trio.BrokenResourceError, OSError) as err:
        raise ChannelError(f"controller at {address} closed the connection: {err}") from err
    return channel


# --- a TCP connection without trio.open_tcp_stream's racing -------------------------------
# ``open_tcp_stream`` races a host's addresses (happy eyeballs) with a nursery and a task
# per address. The connections ddsup makes most often, or from most fresh processes at
# once, are to a literal address or a name that resolves locally, where racing buys
# nothing and the nursery costs CPU every time: every readiness probe of every lane, and
# each agent's connection to its controller (hundreds of agents may start at once). So
# their addresses are tried in turn.


async def connect_tcp(host: str, port: int) -> trio.socket.SocketType:
    """A socket connected to ``host:port``, its addresses tried in turn (a literal one is
    not looked up: trio answers it without a thread). The last address's error is raised
    when none connects."""
    infos = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    error: OSError = OSError(f"no address for {host}")
    for family, type_, proto, _name, address in infos:
        sock = trio.socket.socket(family, type_, proto)
        try:
            await sock.connect(address)
        except OSError as err:
            sock.close()
            error = err
            continue
        except BaseException:
            sock.close()
            raise
        return sock
    raise error
