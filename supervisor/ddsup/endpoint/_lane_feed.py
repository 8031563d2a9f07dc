"""The endpoint's side of the live feed from ``ddsup start`` (``controller._lane_publisher``).

The controller sends the endpoint's ``[endpoint]`` section first, then the set of ready
lanes, then each change of it (lanes that joined, lanes that left); the table follows
it, so a lane that stops being ready leaves the rotation at once. When such a lane has
no request in flight any more, the endpoint says so on the same connection
(:class:`LaneDrained`: ``ddsup restart`` waits for it before it stops the lane). When
the controller goes away (or says something that is not a lane update) the feed ends,
and so does the endpoint.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from dataclasses import dataclass

import trio

from ddsup._errors import UsageError
from ddsup.channel import (
    ADDRESS_ENV,
    SECRET_ENV,
    Channel,
    ChannelError,
    EndpointSetup,
    Hello,
    LaneDrained,
    LanesChanged,
    LanesUpdate,
    ReadyLane,
    Role,
    connect_channel,
    merge_changes,
)
from ddsup.endpoint._lanes import LaneInfo, LaneState, LaneTable
from ddsup.units import EndpointSection

log = logging.getLogger(__name__)

DRAIN_POLL = 0.05  # seconds between looks at a draining lane's count (shared memory)


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
        """Keep ``table`` equal to the controller's ready lanes until the feed ends; say
        when a lane that left the rotation has drained (:class:`LaneDrained`)."""
        send, receive = trio.open_memory_channel[LaneState](math.inf)
        table.on_retired = send.send_nowait
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._report_drained, table, receive)
                await self._apply_updates(table)
                nursery.cancel_scope.cancel()
        finally:
            table.on_retired = None
            await self.channel.aclose()

    async def _apply_updates(self, table: LaneTable) -> None:
        """Each message as it comes; the changes already read behind one as one change.

        A table rebuild walks every lane: one per change made a start's burst of 1,024
        ready lanes quadratic here whenever the controller kept up and sent them one by
        one. What queued while the table was rebuilt is applied with one rebuild."""
        try:
            while (message := await self.channel.receive()) is not None:
                changes: list[LanesChanged] = []
                while isinstance(message, LanesChanged):
                    changes.append(message)
                    message = self.channel.receive_buffered()
                if changes:
                    change = merge_changes(changes)
                    table.change(map(_lane_info, change.added), change.removed)
                if isinstance(message, LanesUpdate):
                    table.declare_models(message.models)
                    table.set_ready(map(_lane_info, message.lanes))
                elif message is not None:
                    raise ChannelError(f"unexpected {message.op!r} message on the lane feed")
        except ChannelError as err:
            log.warning("the lane feed from ddsup start ended: %s", err)

    async def _report_drained(
        self, table: LaneTable, retired: trio.MemoryReceiveChannel[LaneState]
    ) -> None:
        """Say each retired lane drained once nothing is in flight to it through any
        worker. That count lives in memory the workers share, which has no event to wait
        for: while a lane drains, it is looked at every 50 ms (a bounded poll)."""
        draining: dict[str, LaneState] = {}
        while True:
            if not draining:
                state = await retired.receive()
                draining[state.info.instance] = state
            with contextlib.suppress(trio.WouldBlock):
                while True:
                    state = retired.receive_nowait()
                    draining[state.info.instance] = state
            for instance, state in list(draining.items()):
                if table.serves(instance):
                    del draining[instance]  # back in the rotation: not drained
                elif state.outstanding == 0:
                    del draining[instance]
                    try:
                        await self.channel.send(LaneDrained(instance))
                    except (ChannelError, trio.BrokenResourceError, trio.ClosedResourceError):
                        return  # the feed has ended: the reader says so
            if draining:
                await trio.sleep(DRAIN_POLL)


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


def _lane_info(lane: ReadyLane) -> LaneInfo:
    """A lane of the feed as the table holds it: its key read from the variable the feed
    names (``[lane] api_key_env``; only the lane and the endpoint have it), never sent."""
    key = os.environ.get(lane.api_key_env) if lane.api_key_env else None
    return LaneInfo(
        instance=lane.instance,
        model=lane.model,
        url=lane.url,
        served_names=lane.served_names,
        api_key=key or None,
    )
