"""When the endpoint asks its lanes for the names they serve (``GET /v1/models``).

Each lane is asked when it joins (again when it joins again), then every ``REFRESH``
seconds while it stays; a lane that left is not asked, and a change of the table that
brings no lane (a name learned, a lane leaving) asks no one. The learner takes the
joining lanes from the table as they join and the refreshes from their due times, so a
start's lanes joining one by one cost one ask each, not a walk of the table per change.
The asking itself (an HTTP request) is replaced by a recorder here; the routes' tests
ask real lanes over sockets.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing

from ddsup.endpoint import _lane_names
from ddsup.endpoint._config import EndpointConfig
from ddsup.endpoint._lanes import LaneInfo, LaneState, LaneTable

REFRESH = _lane_names.REFRESH


def _info(name: str, port: int = 8000) -> LaneInfo:
    return LaneInfo(name, "m", f"http://127.0.0.1:{port}")


class _Asked:
    """Each ask, as (trio time, lane name); the lane answers after 50 ms (lanes join
    meanwhile), with no names of its own."""

    def __init__(self) -> None:
        self.log: list[tuple[float, str]] = []

    async def ask(self, config: EndpointConfig, lanes: LaneTable, state: LaneState) -> None:
        self.log.append((trio.current_time(), state.info.instance))
        await trio.sleep(0.05)
        lanes.learn_names(state.info, (state.info.model,))

    def since(self, start: float) -> list[str]:
        return sorted(name for at, name in self.log if at >= start)


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> _Asked:
    recorder = _Asked()
    monkeypatch.setattr(_lane_names, "_ask", recorder.ask)
    return recorder


async def test_each_lane_is_asked_when_it_joins_and_at_each_refresh(
    autojump_clock: trio.testing.MockClock, asked: _Asked
) -> None:
    table = LaneTable([_info("a"), _info("b")])
    async with trio.open_nursery() as nursery:
        await nursery.start(_lane_names.learn_lane_names, EndpointConfig(), table)
        assert asked.since(0) == ["a", "b"]  # the lanes of the start, before it serves
        await trio.sleep(1)
        for index in range(50):  # a start's lanes, one change each
            table.change([_info(f"n{index}")], [])
            await trio.sleep(0.01)
        await trio.sleep(1)
        assert asked.since(0.5) == sorted(f"n{index}" for index in range(50))
        table.remove("b")  # a leave asks no one; b is not refreshed any more
        table.learn_names(_info("a"), ("a-lora",))  # nor does a name learned
        await trio.sleep(1)
        assert asked.since(2.5) == []
        await trio.sleep(REFRESH)
        assert asked.since(3.5) == sorted(["a", *(f"n{index}" for index in range(50))])
        nursery.cancel_scope.cancel()


async def test_a_lane_that_joins_again_is_asked_again_and_refreshed_once(
    autojump_clock: trio.testing.MockClock, asked: _Asked
) -> None:
    table = LaneTable([_info("a")])
    async with trio.open_nursery() as nursery:
        await nursery.start(_lane_names.learn_lane_names, EndpointConfig(), table)
        await trio.sleep(1)
        table.change([_info("a", port=8001)], [])  # restarted elsewhere: a new lane state
        await trio.sleep(1)
        assert [name for _at, name in asked.log] == ["a", "a"]
        await trio.sleep(REFRESH)  # the first state's refresh is dropped, the second's kept
        assert [name for _at, name in asked.log] == ["a", "a", "a"]
        nursery.cancel_scope.cancel()
