"""Stop signals, received the same way by ``ddsup start`` and by every node agent.

SIGTERM, SIGINT and SIGHUP ask for a graceful stop; a second one, a stop without grace.
Both processes hold them from their first instant (``_held_signals``: ``ddsup start``
before it launches its agents, an agent before it connects) until trio's receiver takes
them (:func:`receive_held`), so a signal that arrives during the start-up is neither
lost nor fatal; after the receiver closes, the held handlers drop what comes, so a late
signal cannot cut the clean-up (the final sweep, ``result.json``, exit) half-way.
Children are spawned while handlers, not SIG_IGN, are installed, so they start with the
default dispositions.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Set
from contextlib import contextmanager

import trio

from ddsup.agent._held_signals import STOP_SIGNALS as STOP_SIGNALS
from ddsup.agent._held_signals import HeldSignals


@contextmanager
def receive_held(held: HeldSignals) -> Iterator[AsyncIterator[int]]:
    """trio's receiver for ``held``'s signals, with what they held delivered into it first.

    Not set to "ignore" before it opens (a signal would be lost in between): the held
    handlers are what it replaces, and what it puts back when it closes.
    """
    with trio.open_signal_receiver(*held.signals) as signals:
        held.release()
        yield signals


async def watch_signals(
    signals: AsyncIterator[int],
    forwarded: Set[int],
    forward: Callable[[int], None],
    stop: Callable[[int], None],
) -> None:
    """``ddsup start``'s signals (:func:`receive_held`) until cancelled: those a
    unit forwards (``forward``), and the stop signals (``stop``)."""
    async for signum in signals:
        if signum in forwarded:
            forward(signum)
        elif signum in STOP_SIGNALS:
            stop(signum)
