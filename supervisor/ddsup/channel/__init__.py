"""The control channel: authenticated, typed JSON lines between ddsup's processes.

Agents, the endpoint's lane feed and the operator commands talk to ``ddsup start``
through it. ``_messages`` holds every message and the one encode/decode pair;
``_channel`` frames, bounds and authenticates the bytes (trio); ``_client`` is the
operator commands' blocking one-request client.

The names of ``_channel`` are imported when first used (PEP 562, as
``concurrent.futures`` does for its process pool): reading a run's messages
(``ddsup status``) then never imports trio.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ddsup.channel._messages import ChannelError as ChannelError
from ddsup.channel._messages import Hello as Hello
from ddsup.channel._messages import Message as Message
from ddsup.channel._messages import Role as Role
from ddsup.channel._messages import decode as decode
from ddsup.channel._messages import encode as encode

if TYPE_CHECKING:
    from ddsup.channel._channel import ADDRESS_ENV as ADDRESS_ENV
    from ddsup.channel._channel import SECRET_ENV as SECRET_ENV
    from ddsup.channel._channel import Channel as Channel
    from ddsup.channel._channel import LineChannel as LineChannel
    from ddsup.channel._channel import connect_channel as connect_channel
    from ddsup.channel._channel import new_secret as new_secret
    from ddsup.channel._channel import serve_channel as serve_channel

_FROM_CHANNEL = (
    "ADDRESS_ENV",
    "SECRET_ENV",
    "Channel",
    "LineChannel",
    "connect_channel",
    "new_secret",
    "serve_channel",
)


def __getattr__(name: str) -> Any:
    if name not in _FROM_CHANNEL:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module("ddsup.channel._channel"), name)
    globals()[name] = value
    return value
