"""The control channel: authenticated, typed JSON lines between ddsup's processes.

Agents, the endpoint's lane feed and the operator commands talk to ``ddsup start``
through it. ``_messages`` holds every message, ``_codec`` the one encode/decode pair
(``_typed`` checks each field); ``_channel`` frames and bounds the bytes of one
connection; ``_server`` accepts, bounds and authenticates the connections to ``ddsup
start`` (``docs/security.md``); ``_heartbeat`` turns an agent connection's silence into
its loss.
"""

from __future__ import annotations

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
