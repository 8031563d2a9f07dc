"""The control channel's listening socket, apart from the server that serves it.

``ddsup start`` binds it before it launches its agents and before it imports the
channel's messages and codec (``run._head_start``): their connections wait in its
backlog until :func:`~ddsup.channel._server.serve_channel` serves it. So this module
imports trio and nothing of the channel.
"""

from __future__ import annotations

import trio


async def open_listener(host: str) -> trio.SocketListener:
    """A listener on ``host`` (its first address) at a port the kernel picks."""
    listeners = await trio.open_tcp_listeners(0, host=host)
    for other in listeners[1:]:
        await other.aclose()
    return listeners[0]
