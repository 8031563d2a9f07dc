"""The endpoint's live lane table, fed by the controller over the control channel.

When ``ddsup start`` runs the endpoint it passes the control address and secret in the
endpoint's environment (never argv). The endpoint subscribes once; the controller sends
the full set of ready lanes on every change, so a lane that stops being ready leaves the
rotation at once. When the controller goes away the feed ends and so does the endpoint.
"""

from __future__ import annotations

import os

from ddsup._channel import ADDRESS_ENV, SECRET_ENV, connect_channel
from ddsup._endpoint import LaneInfo, LaneTable
from ddsup._errors import UsageError


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
