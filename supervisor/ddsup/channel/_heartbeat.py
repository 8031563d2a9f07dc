"""Heartbeats: on an agent's connection, silence for ``agent_timeout`` means the peer is lost.

A connection to a node that died, froze or dropped off the network does not end: no FIN
or RST ever arrives, and a side with nothing to send would wait forever. So the
controller and each agent send :class:`Heartbeat` every ``agent_timeout / 5`` seconds,
and each treats ``agent_timeout`` without any message from the other as its loss
(:class:`ChannelError`): the controller loses the node (its lanes leave the rotation, or
the run ends, by the units' ``on_failure``), the agent stops everything it runs.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from ddsup.channel._channel import Channel
from ddsup.channel._messages import ChannelError, Heartbeat, Message

BEATS_PER_TIMEOUT = 5


def beat_interval(timeout: float) -> float:
    """Seconds between heartbeats for a peer that gives up after ``timeout`` of silence."""
    return timeout / BEATS_PER_TIMEOUT


async def send_heartbeats(put: Callable[[Message], None], silence: float) -> None:
    """Hand a :class:`Heartbeat` to ``put`` (a connection's ordered outbox) until cancelled;
    ``silence`` is what the peer tolerates (``agent_timeout``)."""
    while True:
        put(Heartbeat())
        await trio.sleep(beat_interval(silence))


async def receive_within(channel: Channel, silence: float, peer: str) -> Message | None:
    """The next message other than a heartbeat; ChannelError after ``silence`` seconds
    without any message."""
    while True:
        with trio.move_on_after(silence):
            message = await channel.receive()
            if not isinstance(message, Heartbeat):
                return message
            continue
        raise ChannelError(f"no word from {peer} for {silence:g}s (unreachable or hung)")
