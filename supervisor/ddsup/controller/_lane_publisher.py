"""The controller's side of the endpoint's live feed (``endpoint._lane_feed`` is the other).

When ``ddsup start`` runs the endpoint it passes the control address and secret in the
endpoint's environment (never argv). The endpoint subscribes once; the controller sends
the ``[endpoint]`` section first (:class:`EndpointSetup`: the endpoint's settings as
data, not as a command line), then the set of ready lanes as it is at that moment
(:class:`LanesUpdate`), then every change as it happens (:class:`LanesChanged`), so a
lane that stops being ready leaves the rotation at once. Changes, not sets: each costs
the same at 8 lanes or 1,024. Changes that queue up while a message is being sent go
out as one (:func:`merge_changes`), and so do those of the same loop turn; the endpoint
applies whatever it has read as one change, so a burst of 1,024 lanes becoming ready
costs it a table rebuild per read, not per lane. The endpoint answers on the same
connection when a lane that left its rotation has no request in flight any more
(:class:`LaneDrained`), which a restart waits for. When the controller goes away the
feed ends and so does the endpoint.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import trio

from ddsup.channel import (
    Channel,
    ChannelError,
    EndpointSetup,
    LaneDrained,
    LanesChanged,
    LanesUpdate,
    merge_changes,
)

log = logging.getLogger(__name__)


class LanePublisher:
    """The controller's side of the feed: every subscriber gets each change of the set.

    ``snapshot`` gives the whole set now (the run's state); a new subscriber gets it, then
    the changes after it. Each subscriber (one per endpoint process) has its own unbounded
    queue drained by its connection's task, so a slow endpoint never delays the
    controller. A subscriber answers :class:`LaneDrained` once a lane that left its
    rotation has nothing in flight; :meth:`expect_drain` turns "every subscriber said so"
    (or went away) into one event, for a restart that drains a lane first.
    """

    def __init__(
        self, setup: EndpointSetup | None, snapshot: Callable[[], LanesUpdate] = LanesUpdate
    ) -> None:
        self._setup = setup
        self.snapshot = snapshot
        self._subscribers: list[trio.MemorySendChannel[LanesChanged]] = []
        self._draining: dict[str, tuple[set[object], trio.Event]] = {}

    def publish(self, changed: LanesChanged) -> None:
        for subscriber in list(self._subscribers):
            try:
                subscriber.send_nowait(changed)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self._subscribers.remove(subscriber)

    def expect_drain(self, instance: str) -> trio.Event:
        """An event set once every current subscriber reports ``instance`` drained.

        Call it right after publishing the set without ``instance``: subscribers answer
        only after they have applied it.
        """
        waiting: set[object] = set(self._subscribers)
        event = trio.Event()
        if waiting:
            self._draining[instance] = (waiting, event)
        else:
            event.set()
        return event

    async def serve(self, channel: Channel) -> None:
        """Send the settings and the current set, then every change, until it goes away;
        meanwhile read what the endpoint reports (lanes drained)."""
        send, receive = trio.open_memory_channel[LanesChanged](math.inf)
        current = self.snapshot()  # taken with the subscription: no change falls between
        self._subscribers.append(send)
        try:
            if self._setup is not None:
                await channel.send(self._setup)
            await channel.send(current)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._read_reports, channel, send, nursery.cancel_scope)
                async with receive:
                    async for changed in receive:
                        # the tasks this loop turn woke (other agents' events) run first,
                        # so their changes go out with this one: a start's burst is a
                        # message per turn, not per lane, and wakes the endpoint as often
                        await trio.lowlevel.checkpoint()
                        await channel.send(merge_changes([changed, *_queued(receive)]))
        finally:
            if send in self._subscribers:
                self._subscribers.remove(send)
            for instance in list(self._draining):
                self._drained(send, instance)  # gone: it has nothing in flight either

    async def _read_reports(
        self, channel: Channel, subscriber: object, scope: trio.CancelScope
    ) -> None:
        """The endpoint's reports until it goes away (then the subscription ends)."""
        try:
            while (message := await channel.receive()) is not None:
                if not isinstance(message, LaneDrained):
                    raise ChannelError(f"unexpected {message.op!r} message on the lane feed")
                self._drained(subscriber, message.instance)
        except ChannelError as err:
            log.warning("the endpoint's lane feed broke: %s", err)
        finally:
            scope.cancel()

    def _drained(self, subscriber: object, instance: str) -> None:
        entry = self._draining.get(instance)
        if entry is None:
            return  # a lane nobody waits for (it left the rotation on its own)
        waiting, event = entry
        waiting.discard(subscriber)
        if not waiting:
            del self._draining[instance]
            event.set()


def _queued(receive: trio.MemoryReceiveChannel[LanesChanged]) -> list[LanesChanged]:
    """Every change already waiting in ``receive`` (none of them waits for more)."""
    queued = []
    while True:
        try:
            queued.append(receive.receive_nowait())
        except trio.WouldBlock:
            return queued
