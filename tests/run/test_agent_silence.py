"""The controller's silence rule for an agent's connection (``channel._heartbeat.Silence``).

A message only notes the time; one cancel scope covers the whole reading and, when its
deadline passes, a message heard since starts the reading over. These tests run on
trio's autojump clock: a wrong deadline shows as a loss too early, too late or never, to
the tick, and a restart that lost a message shows as a missing one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
import trio
import trio.testing

from ddsup.channel._heartbeat import Silence
from ddsup.channel._hello import ChannelError

LIMIT = 2.0


async def _reader(receive: trio.MemoryReceiveChannel[str], silence: Silence, got: list[str]) -> str:
    """What ``_read_reports`` does with a connection: hear each message, stop at "end"."""
    while True:
        message = await receive.receive()
        silence.hear()
        if message == "end":
            return "ended"
        got.append(message)


async def _send_every(send: trio.MemorySendChannel[str], gap: float, count: int) -> None:
    for n in range(count):
        await trio.sleep(gap)
        await send.send(f"m{n}")


async def _read_while(
    talk: Callable[[trio.MemorySendChannel[str]], Awaitable[None]],
) -> tuple[list[str], str | ChannelError]:
    """A connection that ``talk`` feeds, kept by a :class:`Silence` of ``LIMIT``: what was
    read, and how the reading ended (its result, or the loss)."""
    send, receive = trio.open_memory_channel[str](0)
    silence, got = Silence("the agent on n0", LIMIT), list[str]()
    ended: str | ChannelError
    async with trio.open_nursery() as nursery:
        nursery.start_soon(talk, send)
        try:
            with trio.fail_after(100):
                ended = await silence.keep(lambda: _reader(receive, silence, got))
        except ChannelError as err:
            ended = err
        nursery.cancel_scope.cancel()
    return got, ended


async def test_a_talking_peer_outlives_many_limits_and_nothing_is_lost(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def talk(send: trio.MemorySendChannel[str]) -> None:
        await _send_every(send, 0.9 * LIMIT, 20)  # each gap just under the limit
        await send.send("end")

    got, ended = await _read_while(talk)
    assert ended == "ended"
    assert got == [f"m{n}" for n in range(20)]
    assert trio.current_time() == pytest.approx(20 * 0.9 * LIMIT)


async def test_a_peer_silent_for_the_limit_is_lost_then_and_not_before(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def talk(send: trio.MemorySendChannel[str]) -> None:
        await _send_every(send, 0.5, 7)  # the last at 3.5 s, then nothing

    got, ended = await _read_while(talk)
    assert isinstance(ended, ChannelError)
    assert "no word from the agent on n0 for 2s" in str(ended)
    assert len(got) == 7
    assert trio.current_time() == pytest.approx(3.5 + LIMIT)


async def test_silence_counts_only_from_the_limit_set_while_reading(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """No limit until the agent has reported (preflight blocks it); set then, it holds."""
    _send, receive = trio.open_memory_channel[str](0)  # a peer that never says a word
    silence, got = Silence("the agent on n0"), list[str]()

    async def reader() -> str:
        await trio.sleep(1000)  # a long preflight: no limit yet
        silence.expect_within(LIMIT)
        return await _reader(receive, silence, got)

    with trio.fail_after(2000), pytest.raises(ChannelError):
        await silence.keep(reader)
    assert trio.current_time() == pytest.approx(1000 + LIMIT)
