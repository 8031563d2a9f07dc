"""The controller's side of the endpoint's live lane feed (``endpoint._lane_feed`` is the other).

When ``ddsup start`` runs the endpoint it passes the control address and secret in the
endpoint's environment (never argv). The endpoint subscribes once; the controller sends
the full set of ready lanes on every change, so a lane that stops being ready leaves the
rotation at once. When the controller goes away the feed ends and so does the endpoint.
"""

from __future__ import annotations

import math
from typing import Any

import trio

from ddsup.channel._channel import Channel


class LanePublisher:
    """The controller's side of the feed: every subscriber gets each new ready-lane set.

    Each subscriber has its own unbounded queue drained by its connection's task, so a
    slow endpoint never delays the controller; unchanged sets are not sent again.
    """

    def __init__(self) -> None:
        self._subscribers: list[trio.MemorySendChannel[dict[str, Any]]] = []
        self._current: dict[str, Any] = {"op": "lanes", "lanes": [], "models": []}

    def publish(self, lanes: list[dict[str, str]], models: list[str]) -> None:
        message = {"op": "lanes", "lanes": lanes, "models": models}
        if message == self._current:
            return
        self._current = message
        for subscriber in list(self._subscribers):
            try:
                subscriber.send_nowait(message)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self._subscribers.remove(subscriber)

    async def serve(self, channel: Channel) -> None:
        """Send the current set, then every change, until the subscriber goes away."""
        send, receive = trio.open_memory_channel[dict[str, Any]](math.inf)
        self._subscribers.append(send)
        try:
            await channel.send(self._current)
            async with receive:
                async for message in receive:
                    await channel.send(message)
        finally:
            if send in self._subscribers:
                self._subscribers.remove(send)
