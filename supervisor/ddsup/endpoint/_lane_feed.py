"""The endpoint's side of the live lane feed from ``ddsup start`` (``run._lane_feed``).

The controller sends the full set of ready lanes on every change; the table follows it,
so a lane that stops being ready leaves the rotation at once. When the controller goes
away the feed ends and so does the endpoint.
"""

from __future__ import annotations

import os

from ddsup._errors import UsageError
from ddsup.channel._channel import ADDRESS_ENV, SECRET_ENV, connect_channel
from ddsup.endpoint._lanes import LaneInfo, LaneTable


def controller_address() -> tuple[str, str]:
    """Take (and remove, so children never see them) the control address and secret."""
    address = os.environ.pop(ADDRESS_ENV, None)
    secret = os.environ.pop(SECRET_ENV, None)
    if not address or not secret:
        raise UsageError("--lanes-from-controller: only ddsup start can run the endpoint this way")
    return address, secret


async def follow_controller(table: LaneTable, address: str, secret: str) -> None:
    """Keep ``table`` equal to the controller's ready lanes until the controller is gone."""
    channel = await connect_channel(address, secret, {"op": "hello", "role": "lanes"})
    try:
        while (message := await channel.receive()) is not None:
            if message.get("op") != "lanes":
                continue
            table.declare_models(message.get("models", ()))
            table.set_ready(
                LaneInfo(instance=lane["instance"], model=lane["model"], url=lane["url"])
                for lane in message["lanes"]
            )
    finally:
        await channel.aclose()
