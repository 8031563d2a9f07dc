"""The control channel: authenticated, typed JSON lines between ddsup's processes.

Agents, the endpoint's lane feed and the operator commands talk to ``ddsup start``
through it. ``_messages`` holds every message, ``_codec`` the one encode/decode pair
(``_typed`` checks each field); ``_channel`` frames and bounds the bytes of one
connection (trio); ``_server`` accepts, bounds and authenticates the connections to
``ddsup start`` (``docs/security.md``) on the socket ``_listener`` binds; ``_heartbeat``
turns an agent connection's silence into its loss; ``_client`` is the operator
commands' blocking one-request client.

Its names are imported when first used (PEP 562, as ``concurrent.futures`` does for its
process pool): ``ddsup status`` then imports neither trio (``_channel``, ``_server``) nor
the run's own messages (``_messages``, ``_codec``), only ``_hello``, ``_operator_messages``
and ``_operator_codec``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ddsup._lazy import lazy_names

if TYPE_CHECKING:
    from ddsup.channel._channel import ADDRESS_ENV as ADDRESS_ENV
    from ddsup.channel._channel import SECRET_ENV as SECRET_ENV
    from ddsup.channel._channel import Channel as Channel
    from ddsup.channel._channel import LineChannel as LineChannel
    from ddsup.channel._channel import connect_channel as connect_channel
    from ddsup.channel._channel import new_secret as new_secret
    from ddsup.channel._codec import decode as decode
    from ddsup.channel._codec import encode as encode
    from ddsup.channel._messages import ChannelError as ChannelError
    from ddsup.channel._messages import Hello as Hello
    from ddsup.channel._messages import Message as Message
    from ddsup.channel._messages import Role as Role
    from ddsup.channel._server import ServerLimits as ServerLimits
    from ddsup.channel._server import serve_channel as serve_channel
    from ddsup.channel._wire import line_json as line_json

_LAZY = {
    "decode": "ddsup.channel._codec",
    "encode": "ddsup.channel._codec",
    "ChannelError": "ddsup.channel._hello",
    "Hello": "ddsup.channel._hello",
    "Message": "ddsup.channel._messages",
    "Role": "ddsup.channel._hello",
    "ADDRESS_ENV": "ddsup.channel._channel",
    "SECRET_ENV": "ddsup.channel._channel",
    "Channel": "ddsup.channel._channel",
    "LineChannel": "ddsup.channel._channel",
    "connect_channel": "ddsup.channel._channel",
    "new_secret": "ddsup.channel._channel",
    "ServerLimits": "ddsup.channel._server",
    "serve_channel": "ddsup.channel._server",
    "line_json": "ddsup.channel._wire",
}

__getattr__ = lazy_names(__name__, _LAZY, globals())
