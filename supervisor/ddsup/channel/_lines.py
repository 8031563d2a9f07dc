"""One connection of newline-framed messages, in a codec of the caller's choice (trio).

The control channel (``_channel``: every message, the controller's side and the endpoint's
lane feed), a node agent's connection (``_agent_channel``: an agent's messages only) and
the endpoint's link to its workers (``endpoint._worker_link``) are each this framing with
their own codec; :func:`connect_lines` opens one to ``host:port`` and says hello on it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

import trio

from ddsup.channel._hello import MAX_LINE, ChannelError

RECEIVE_SIZE = 65536

M = TypeVar("M")


class LineChannel(Generic[M]):
    """One connection of newline-framed messages in a codec of the caller's choice.

    ``send`` is safe from several tasks (it takes a lock). :class:`Channel` is the control
    channel's codec; the endpoint's link to its workers uses its own on the same framing.
    ``max_line`` bounds what one line may hold, and so what a peer can make this side
    buffer; the control channel's server lowers it until the peer has authenticated.
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
        self.max_line = max_line

    async def send(self, message: M) -> None:
        await self.send_many([message])

    async def send_many(self, messages: list[M]) -> None:
        """``messages`` in order, in one write: what queued while the last write waited
        (an agent's events of a start's burst) costs one system call, not one each."""
        data = b"".join(self._encode(message) + b"\n" for message in messages)
        async with self._send_lock:
            await self._stream.send_all(data)

    async def receive(self) -> M | None:
        """The next message, or None at a clean end of stream; ChannelError otherwise."""
        while True:
            newline = self._buffer.find(b"\n", self._scanned)
            if newline > self.max_line or (newline < 0 and len(self._buffer) > self.max_line):
                raise ChannelError(f"message longer than {self.max_line} bytes")
            if newline >= 0:
                line = bytes(self._buffer[:newline])
                del self._buffer[: newline + 1]
                self._scanned = 0
                return self._decode(line)
            self._scanned = len(self._buffer)
            try:
                chunk = await self._stream.receive_some(RECEIVE_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as err:
                raise ChannelError(f"connection lost: {err}") from err
            if not chunk:
                if self._buffer:
                    raise ChannelError("connection closed mid-message")
                return None
            self._buffer += chunk

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
        stream = await trio.open_tcp_stream(host.strip("[]"), int(port))
    except (OSError, ValueError) as err:
        raise ChannelError(f"cannot reach the ddsup controller at {address}: {err}") from err
    channel = make(stream)
    try:
        await channel.send(hello)
    except (trio.BrokenResourceError, OSError) as err:
        raise ChannelError(f"controller at {address} closed the connection: {err}") from err
    return channel
