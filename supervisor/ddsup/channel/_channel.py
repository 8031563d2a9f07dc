"""The control channel: JSON lines over TCP, authenticated with a per-run secret.

Agents, the endpoint (for its live lane feed) and the operator commands (status, stop)
talk to the controller through it. The first line a client sends is a :class:`Hello`
carrying the secret; the server (``_channel_server``) compares it in constant time and drops
the connection on mismatch, so nobody else on the cluster can drive or read the run. The
secret lives in the 0600 state directory and in the environment of the processes that
need it, never in argv. Lines carry the typed messages of ``_messages``; a line that
does not decode, or is longer than the channel's ``max_line``, ends its connection
(:class:`ChannelError`). The framing is ``_lines``'; a node agent's own connection,
which speaks only an agent's messages, ``_agent_channel``.
"""

from __future__ import annotations

import trio

from ddsup.channel._codec import decode, encode
from ddsup.channel._hello import ADDRESS_ENV as ADDRESS_ENV
from ddsup.channel._hello import SECRET_ENV as SECRET_ENV
from ddsup.channel._hello import new_secret as new_secret
from ddsup.channel._lines import LineChannel as LineChannel
from ddsup.channel._lines import connect_lines
from ddsup.channel._messages import MAX_LINE, Hello, Message


class Channel(LineChannel[Message]):
    """A control-channel connection: typed messages (``_messages``) as JSON lines."""

    def __init__(self, stream: trio.abc.Stream, *, max_line: int = MAX_LINE) -> None:
        super().__init__(stream, encode, decode, max_line=max_line)


async def connect_channel(address: str, hello: Hello) -> Channel:
    """Connect to ``host:port`` and say ``hello``; raises ChannelError when unreachable."""
    return await connect_lines(address, hello, Channel)
