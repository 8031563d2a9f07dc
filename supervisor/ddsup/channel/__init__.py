"""The control channel: authenticated JSON lines between the controller and its peers.

Agents, the endpoint's lane feed and the operator commands talk to ``ddsup start``
through it. ``_channel`` frames, bounds and authenticates the bytes.
"""

from __future__ import annotations

from ddsup.channel._channel import ADDRESS_ENV as ADDRESS_ENV
from ddsup.channel._channel import SECRET_ENV as SECRET_ENV
from ddsup.channel._channel import Channel as Channel
from ddsup.channel._channel import ChannelError as ChannelError
from ddsup.channel._channel import connect_channel as connect_channel
from ddsup.channel._channel import new_secret as new_secret
from ddsup.channel._channel import serve_channel as serve_channel
