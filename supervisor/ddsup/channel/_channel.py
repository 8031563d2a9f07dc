"""The control channel: JSON lines over TCP, authenticated with a per-run secret.

Agents, the endpoint (for its live lane feed) and the operator commands (status, stop)
talk to the controller through it. The first line a client sends is a :class:`Hello`
carrying the secret; the server compares it in constant time and drops the connection on
mismatch, so nobody else on the cluster can drive or read the run. The secret lives in
the 0600 state directory and in the environment of the processes that need it, never in
argv. Lines carry the typed messages of ``_messages``; a line that does not decode ends
its connection (:class:`ChannelError`).
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

import trio

from ddsup.channel._messages import MAX_LINE, ChannelError, Hello, Message, decode, encode

HELLO_TIMEOUT = 10.0

SECRET_ENV = "DDSUP_CONTROL_SECRET"
ADDRESS_ENV = "DDSUP_CONTROL_ADDRESS"


def new_secret() -> str:
    return secrets.token_hex(32)


M = TypeVar("M")


class LineChannel(Generic[M]):
    """One connection of newline-framed messages in a codec of the caller's choice.

    ``send`` is safe from several tasks (it takes a lock). :class:`Channel` is the control
    channel's codec; the endpoint's link to its workers uses its own on the same framing.
    """

    def __init__(
        self,
        stream: trio.abc.Stream,
        encoder: Callable[[M], bytes],
        decoder: Callable[[bytes], M],
    ) -> None:
        self._stream = stream
        self._encode = encoder
        self._decode = decoder
        self._buffer = bytearray()
        self._send_lock = trio.Lock()

    async def send(self, message: M) -> None:
        data = self._encode(message) + b"\n"
        async with self._send_lock:
            await self._stream.send_all(data)

    async def receive(self) -> M | None:
        """The next message, or None at a clean end of stream; ChannelError otherwise."""
        while True:
            newline = self._buffer.find(b"\n")
            if newline >= 0:
                line = bytes(self._buffer[:newline])
                del self._buffer[: newline + 1]
                return self._decode(line)
            if len(self._buffer) > MAX_LINE:
                raise ChannelError("message too long")
            try:
                chunk = await self._stream.receive_some(65536)
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


class Channel(LineChannel[Message]):
    """A control-channel connection: typed messages (``_messages``) as JSON lines."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        super().__init__(stream, encode, decode)


Handler = Callable[[Channel, Hello], Awaitable[None]]


async def serve_channel(
    handler: Handler,
    secret: str,
    *,
    host: str = "127.0.0.1",
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Accept authenticated connections and run ``handler(channel, hello)`` for each."""
    listeners = await trio.open_tcp_listeners(0, host=host)
    port = listeners[0].socket.getsockname()[1]

    async def accept(stream: trio.SocketStream) -> None:
        channel = Channel(stream)
        try:
            with trio.fail_after(HELLO_TIMEOUT):
                hello = await channel.receive()
            if not isinstance(hello, Hello):
                return
            if not hmac.compare_digest(hello.secret.encode(), secret.encode()):
                return
            await handler(channel, hello)
        except (
            ChannelError,
            trio.TooSlowError,
            trio.BrokenResourceError,
            trio.ClosedResourceError,
        ):
            pass
        finally:
            await channel.aclose()

    task_status.started(port)
    await trio.serve_listeners(accept, listeners)


async def connect_channel(address: str, hello: Hello) -> Channel:
    """Connect to ``host:port`` and say ``hello``; raises ChannelError when unreachable."""
    host, _, port = address.rpartition(":")
    try:
        stream = await trio.open_tcp_stream(host.strip("[]"), int(port))
    except (OSError, ValueError) as err:
        raise ChannelError(f"cannot reach the ddsup controller at {address}: {err}") from err
    channel = Channel(stream)
    try:
        await channel.send(hello)
    except (trio.BrokenResourceError, OSError) as err:
        raise ChannelError(f"controller at {address} closed the connection: {err}") from err
    return channel
