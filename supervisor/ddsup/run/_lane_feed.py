"""The controller's side of the endpoint's live feed (``endpoint._lane_feed`` is the other).

When ``ddsup start`` runs the endpoint it passes the control address and secret in the
endpoint's environment (never argv). The endpoint subscribes once; the controller sends
the ``[endpoint]`` section first (:class:`EndpointSetup`: the endpoint's settings as
data, not as a command line), then the set of ready lanes as it is at that moment
(:class:`LanesUpdate`), then every change as it happens (:class:`LanesChanged`), so a
lane that stops being ready leaves the rotation at once. Changes, not sets: each costs
the same at 8 lanes or 1,024. Changes that queue up while a message is being sent go
out as one (:func:`merge_changes`): a burst of 1,024 lanes becoming ready is a few
messages, and the endpoint rebuilds its table a few times, not 1,024. When the
controller goes away the feed ends and so does the endpoint.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence

import trio

from ddsup._errors import UsageError
from ddsup.channel._channel import Channel
from ddsup.channel._messages import EndpointSetup, LanesChanged, LanesUpdate, ReadyLane
from ddsup.units._model import UnitSet


def endpoint_setup(units: UnitSet) -> EndpointSetup | None:
    """The endpoint's section, checked first: its ``api_key_env`` must name a set variable."""
    endpoint = units.endpoint
    if endpoint is None or endpoint.endpoint is None:
        return None
    section = endpoint.endpoint
    if section.api_key_env and not os.environ.get(section.api_key_env):
        raise UsageError(
            f"{endpoint.source.path}: api_key_env names {section.api_key_env}, which is not set"
        )
    return EndpointSetup(section)


class LanePublisher:
    """The controller's side of the feed: every subscriber gets each change of the set.

    ``snapshot`` gives the whole set now (the run's state); a new subscriber gets it, then
    the changes after it. Each subscriber has its own unbounded queue drained by its
    connection's task, so a slow endpoint never delays the controller.
    """

    def __init__(
        self, setup: EndpointSetup | None, snapshot: Callable[[], LanesUpdate] = LanesUpdate
    ) -> None:
        self._setup = setup
        self.snapshot = snapshot
        self._subscribers: list[trio.MemorySendChannel[LanesChanged]] = []

    def publish(self, changed: LanesChanged) -> None:
        for subscriber in list(self._subscribers):
            try:
                subscriber.send_nowait(changed)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self._subscribers.remove(subscriber)

    async def serve(self, channel: Channel) -> None:
        """Send the settings and the current set, then every change, until it goes away."""
        send, receive = trio.open_memory_channel[LanesChanged](math.inf)
        current = self.snapshot()  # taken with the subscription: no change falls between
        self._subscribers.append(send)
        try:
            if self._setup is not None:
                await channel.send(self._setup)
            await channel.send(current)
            async with receive:
                async for changed in receive:
                    await channel.send(merge_changes([changed, *_queued(receive)]))
        finally:
            if send in self._subscribers:
                self._subscribers.remove(send)


def _queued(receive: trio.MemoryReceiveChannel[LanesChanged]) -> list[LanesChanged]:
    """Every change already waiting in ``receive`` (none of them waits for more)."""
    queued = []
    while True:
        try:
            queued.append(receive.receive_nowait())
        except trio.WouldBlock:
            return queued


def merge_changes(changes: Sequence[LanesChanged]) -> LanesChanged:
    """One change with the effect of ``changes`` applied in order.

    The endpoint applies a change's removals, then its additions (``LaneTable.change``):
    a lane that left and came back is in both, one that came and left only in
    ``removed`` (the endpoint ignores an unknown removal), the last URL of a lane wins.
    """
    if len(changes) == 1:
        return changes[0]
    added: dict[str, ReadyLane] = {}
    removed: dict[str, None] = {}  # ordered, without repeats
    for change in changes:
        for instance in change.removed:
            added.pop(instance, None)
            removed[instance] = None
        for lane in change.added:
            added[lane.instance] = lane
    return LanesChanged(added=tuple(added.values()), removed=tuple(removed))
