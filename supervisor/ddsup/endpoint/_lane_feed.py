"""The endpoint's side of the live feed from ``ddsup start`` (``run._lane_feed``).

The controller sends the endpoint's ``[endpoint]`` section first, then the set of ready
lanes, then each change of it (lanes that joined, lanes that left); the table follows
it, so a lane that stops being ready leaves the rotation at once. When the controller goes away (or says something that is
not a lane update) the feed ends, and so does the endpoint.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from ddsup._errors import UsageError
from ddsup.channel._channel import ADDRESS_ENV, SECRET_ENV, Channel, connect_channel
from ddsup.channel._messages import (
    ChannelError,
    EndpointSetup,
    Hello,
    LanesChanged,
    LanesUpdate,
    ReadyLane,
    Role,
)
from ddsup.endpoint._lanes import LaneInfo, LaneTable
from ddsup.units._model import EndpointSection

log = logging.getLogger(__name__)


def controller_address() -> tuple[str, str]:
    """Take (and remove, so children never see them) the control address and secret."""
    address = os.environ.pop(ADDRESS_ENV, None)
    secret = os.environ.pop(SECRET_ENV, None)
    if not address or not secret:
        raise UsageError("--lanes-from-controller: only ddsup start can run the endpoint this way")
    return address, secret


@dataclass
class ControllerFeed:
    """A subscription to the controller: the endpoint's settings, then its ready lanes."""

    channel: Channel
    section: EndpointSection

    async def follow(self, table: LaneTable) -> None:
        """Keep ``table`` equal to the controller's ready lanes until the feed ends."""
        try:
            while (message := await self.channel.receive()) is not None:
                if isinstance(message, LanesChanged):
                    table.change(map(_info, message.added), message.removed)
                elif isinstance(message, LanesUpdate):
                    table.declare_models(message.models)
                    table.set_ready(map(_info, message.lanes))
                else:
                    raise ChannelError(f"unexpected {message.op!r} message on the lane feed")
        except ChannelError as err:
            log.warning("the lane feed from ddsup start ended: %s", err)
        finally:
            await self.channel.aclose()


def _info(lane: ReadyLane) -> LaneInfo:
    return LaneInfo(instance=lane.instance, model=lane.model, url=lane.url)


async def open_controller_feed(address: str, secret: str) -> ControllerFeed:
    """Subscribe to the controller; its first message is the endpoint's section."""
    channel = await connect_channel(address, Hello(Role.LANES, secret))
    try:
        first = await channel.receive()
        if not isinstance(first, EndpointSetup):
            raise ChannelError(f"ddsup start sent {first!r} before the endpoint's settings")
    except BaseException:
        await channel.aclose()
        raise
    return ControllerFeed(channel, first.section)
