"""Heartbeats: on an agent's connection, silence for ``agent_timeout`` means the peer is lost.

A connection to a node that died, froze or dropped off the network does not end: no FIN
or RST ever arrives, and a side with nothing to send would wait forever. So each side
treats ``agent_timeout`` without any message from the other as its loss
(:class:`ChannelError`): the controller loses the node (its lanes leave the rotation, or
the run ends, by the units' ``on_failure``), the agent stops everything it runs.

What keeps an idle connection talking is one round trip per beat, and only the
controller keeps time. Every ``agent_timeout / BEATS_PER_TIMEOUT`` seconds its
:class:`Pacemaker` (one task for all connections, not one per agent) hands a
:class:`Heartbeat` to every agent's outbox at once, and each agent answers every
heartbeat it receives with one of its own (:func:`receive_within`'s ``answer``); an
agent sends none unasked, and the controller never answers one. Each side still hears
the other once per beat: a frozen controller sends no beats (its agents time out), a
frozen agent answers none (the controller times it out), and a dead node or network
silences both directions. What this saves the controller, with 128 idle agents: a
timer task's wake-up per agent and beat, and the wake-ups of beats arriving one at a
time (the answers arrive together, a few loop turns for all of them).

The controller's side of that silence is :class:`Silence`: a message only notes the time,
and one cancel scope covers the whole reading of a connection (no timeout per message:
a start's thousands of reports each paid for one). An agent, with one connection and
few messages, uses :func:`receive_within`.

Why three beats per timeout and not more: TCP neither loses nor reorders a beat, so a
beat only has to be *on time*, and a peer is declared lost only when a round trip is
late by more than ``agent_timeout * (1 - 1 / BEATS_PER_TIMEOUT)``: 20 s at the default
30 s, far beyond any scheduling delay of a live process, while every beat fewer is a
message fewer per agent for the controller.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

import trio

from ddsup.channel._agent_messages import HEARTBEAT, Heartbeat
from ddsup.channel._hello import ChannelError
from ddsup.channel._lines import LineChannel

M = TypeVar("M")
T = TypeVar("T")

BEATS_PER_TIMEOUT = 3


def beat_interval(timeout: float) -> float:
    """Seconds between heartbeats for a peer that gives up after ``timeout`` of silence."""
    return timeout / BEATS_PER_TIMEOUT


class Pacemaker:
    """The controller's one clock for the heartbeats of every agent connection.

    A connection joins with :meth:`beating` (its outbox's ``put``) for as long as it
    lasts; :meth:`run` hands each a heartbeat every :func:`beat_interval`, all in one
    loop turn, so the controller wakes once per beat for all its agents.
    """

    def __init__(self, silence: float) -> None:
        self.interval = beat_interval(silence)
        self._outboxes: dict[int, Callable[[Heartbeat], None]] = {}
        self._next = 0

    @contextlib.contextmanager
    def beating(self, put: Callable[[Heartbeat], None]) -> Iterator[None]:
        """Beat on the connection whose ordered outbox ``put`` feeds, until the block ends."""
        self._next += 1
        key = self._next
        self._outboxes[key] = put
        try:
            yield
        finally:
            del self._outboxes[key]

    async def run(self) -> None:
        """Beat until cancelled (the controller's lifetime)."""
        while True:
            await trio.sleep(self.interval)
            for put in list(self._outboxes.values()):
                put(HEARTBEAT)


async def receive_within(
    channel: LineChannel[M],
    silence: float,
    peer: str,
    *,
    answer: Callable[[Heartbeat], None] | None = None,
) -> M | None:
    """The next message other than a heartbeat; ChannelError after ``silence`` seconds
    without any message. ``answer`` (the agent's ordered outbox) gets a heartbeat back for
    every heartbeat received: the controller's beats are round trips."""
    while True:
        with trio.move_on_after(silence):
            message = await channel.receive()
            if not isinstance(message, Heartbeat):
                return message
            if answer is not None:
                answer(HEARTBEAT)
            continue
        raise ChannelError(f"no word from {peer} for {silence:g}s (unreachable or hung)")


class Silence:
    """When a connection last said anything, and its loss once it has said nothing for
    ``limit`` seconds: the controller's side of an agent's connection.

    Not a timeout per message (:func:`receive_within`): a start's 128 agents send
    thousands of reports, and a cancel scope per wait (its entry, its exit, a deadline in
    trio's heap) is a noticeable share of the controller's CPU while they do. Here a message only notes the time
    (:meth:`hear`); one cancel scope covers the whole reading, its deadline ``limit``
    after the last message heard when it was set. When that deadline passes, a message
    heard since sets the next one and the reading starts over (a channel cancelled in a
    read loses nothing); none heard is the loss.
    """

    def __init__(self, peer: str, limit: float = math.inf) -> None:
        self.peer = peer
        self.limit = limit
        self.heard = trio.current_time()
        self._scope: trio.CancelScope | None = None

    def hear(self) -> None:
        """A message came: the silence starts again from now."""
        self.heard = trio.current_time()

    def expect_within(self, limit: float) -> None:
        """From now on, ``limit`` seconds without a word is the connection's loss."""
        self.limit = limit
        self.hear()
        if self._scope is not None:
            self._scope.deadline = self.heard + limit

    async def keep(self, read: Callable[[], Awaitable[T]]) -> T:
        """What ``read()`` returns (it calls :meth:`hear` for every message it reads);
        ChannelError once nothing was heard for ``limit`` seconds."""
        while True:
            with trio.CancelScope(deadline=self.heard + self.limit) as self._scope:
                return await read()
            if trio.current_time() >= self.heard + self.limit:
                raise ChannelError(
                    f"no word from {self.peer} for {self.limit:g}s (unreachable or hung)"
                )
