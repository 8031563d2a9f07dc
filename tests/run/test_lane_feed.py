"""The endpoint's lane feed, both ends in one process over a real socket.

The controller's :class:`LanePublisher` sends the set of ready lanes once and then only
changes; the endpoint's :class:`ControllerFeed` keeps its :class:`LaneTable` equal to the
controller's set. What a user relies on: a lane that becomes ready is routed to, a lane
that stops being ready leaves the rotation, and an endpoint that subscribes late starts
from the set as it is, whatever changed before.
"""

from __future__ import annotations

from functools import partial

import trio

from ddsup.channel import serve_channel
from ddsup.channel._channel import Channel
from ddsup.channel._messages import (
    EndpointSetup,
    Hello,
    LanesChanged,
    LanesUpdate,
    Message,
    ReadyLane,
    merge_changes,
)
from ddsup.controller._lane_publisher import LanePublisher
from ddsup.endpoint._lane_feed import ControllerFeed, open_controller_feed
from ddsup.endpoint._lanes import LaneInfo, LaneTable
from ddsup.units._model import EndpointSection

SECRET = "feed-secret"


def _lane(index: int) -> ReadyLane:
    return ReadyLane(f"m@{index}", "m", f"http://127.0.0.1:{8000 + index}")


class _Table(LaneTable):
    """A lane table that says when it changed, and counts the changes applied to it (each
    a new generation, which the request path's index re-reads the table for)."""

    def __init__(self) -> None:
        self.changed = trio.Event()
        self.applied = 0
        super().__init__([])

    def _moved_on(self) -> None:
        super()._moved_on()
        self.applied += 1
        self.changed.set()

    async def until(self, *instances: str) -> None:
        while sorted(s.info.instance for s in self.states()) != sorted(instances):
            self.changed = trio.Event()
            await self.changed.wait()


async def _subscribe(
    nursery: trio.Nursery, publisher: LanePublisher
) -> tuple[ControllerFeed, _Table]:
    async def handler(channel: Channel, hello: Hello) -> None:
        await publisher.serve(channel)

    port = await nursery.start(partial(serve_channel, handler, SECRET))
    feed = await open_controller_feed(f"127.0.0.1:{port}", SECRET)
    table = _Table()
    nursery.start_soon(feed.follow, table)
    return feed, table


async def test_a_late_subscriber_gets_the_set_then_every_change() -> None:
    current = LanesUpdate((_lane(0), _lane(1)), ("m",))
    publisher = LanePublisher(EndpointSetup(EndpointSection(port=9100)), lambda: current)
    publisher.publish(LanesChanged(added=(_lane(7),)))  # before anyone listens: not replayed
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            feed, table = await _subscribe(nursery, publisher)
            assert feed.section.port == 9100
            await table.until("m@0", "m@1")
            assert table.known_models() == ["m"]
            publisher.publish(LanesChanged(added=(_lane(2),), removed=("m@0",)))
            await table.until("m@1", "m@2")
            publisher.publish(LanesChanged(removed=("m@1", "m@2")))
            await table.until()
            assert table.ready("m") == () and table.is_known("m")
            nursery.cancel_scope.cancel()


def test_a_change_replaces_a_lane_of_the_same_name_and_ignores_unknown_removals() -> None:
    table = LaneTable([])
    table.change([LaneInfo("m@0", "m", "http://127.0.0.1:8000")], ["m@9"])
    table.change([LaneInfo("m@0", "m", "http://127.0.0.1:9999")], [])
    assert [s.info.url for s in table.ready("m")] == ["http://127.0.0.1:9999"]


def _apply(table: LaneTable, change: LanesChanged) -> None:
    table.change([LaneInfo(a.instance, a.model, a.url) for a in change.added], change.removed)


def _lanes_of(table: LaneTable) -> list[tuple[str, str]]:
    return sorted((s.info.instance, s.info.url) for s in table.states())


def test_merged_changes_leave_the_table_as_the_changes_one_by_one() -> None:
    moved = ReadyLane("m@1", "m", "http://127.0.0.1:9001")
    changes = [
        LanesChanged(added=(_lane(0), _lane(1), _lane(2))),
        LanesChanged(removed=("m@0",)),  # came and left
        LanesChanged(removed=("m@1",)),
        LanesChanged(added=(moved,)),  # left and came back, elsewhere
        LanesChanged(added=(_lane(3),), removed=("m@9",)),  # unknown removal
        LanesChanged(added=(ReadyLane("m@3", "m", "http://127.0.0.1:9003"),)),  # last wins
    ]
    one_by_one, merged = LaneTable([]), LaneTable([])
    for table in (one_by_one, merged):
        table.change([LaneInfo("m@5", "m", "http://127.0.0.1:8005")], [])
    for change in changes:
        _apply(one_by_one, change)
    _apply(merged, merge_changes(changes))
    assert _lanes_of(merged) == _lanes_of(one_by_one)
    assert ("m@1", "http://127.0.0.1:9001") in _lanes_of(merged)
    assert ("m@3", "http://127.0.0.1:9003") in _lanes_of(merged)


async def test_a_burst_of_changes_reaches_the_endpoint_in_few_messages() -> None:
    """1,000 lanes becoming ready at once: every one is routed to, without the endpoint
    rebuilding its table once per lane (the 3.8 s p99 of the 128 × 8 bench)."""
    publisher = LanePublisher(EndpointSetup(EndpointSection()), lambda: LanesUpdate((), ("m",)))
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            _feed, table = await _subscribe(nursery, publisher)
            await table.until()
            before = table.applied
            for index in range(1000):
                publisher.publish(LanesChanged(added=(_lane(index),)))
            await table.until(*(f"m@{i}" for i in range(1000)))
            assert table.applied - before < 10, table.applied - before
            nursery.cancel_scope.cancel()


async def test_changes_that_arrive_together_are_applied_as_one() -> None:
    """A controller that keeps up sends a start's burst one change per message; what the
    endpoint reads at once is applied at once, in order (a full set in the middle too)."""
    burst: list[Message] = [LanesChanged(added=(_lane(index),)) for index in range(1000)]
    burst += [LanesUpdate((_lane(5), _lane(6)), ("m",)), LanesChanged(added=(_lane(2000),))]

    async def controller(channel: Channel, hello: Hello) -> None:
        await channel.send(EndpointSetup(EndpointSection()))
        await channel.send(LanesUpdate((), ("m",)))
        await channel.send_many(burst)  # one message each, in one write
        await trio.sleep_forever()

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(partial(serve_channel, controller, SECRET))
            feed = await open_controller_feed(f"127.0.0.1:{port}", SECRET)
            table = _Table()
            nursery.start_soon(feed.follow, table)
            await table.until("m@5", "m@6", "m@2000")
            assert table.applied < 20, table.applied  # 1,003 when applied one by one
            nursery.cancel_scope.cancel()
