"""Stop signals, received the same way by ``ddsup start`` and by every node agent.

SIGTERM, SIGINT and SIGHUP ask for a graceful stop; a second one, a stop without grace.
In a node agent they are set to "ignore" before the receiver opens and stay ignored
after it closes: until the agent watches them nothing runs yet that needs stopping, and
after it no longer does (the final sweep, exit) a late signal must not cut the cleanup
half-way. ``ddsup start`` holds them instead (``_held_signals``) from before it launches
its agents until trio's receiver takes them, and drops them after it closes. Children are spawned while the receiver's handlers, not SIG_IGN, are
installed, so they start with the default dispositions.
"""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator, Callable, Iterator, Set
from contextlib import AbstractContextManager, contextmanager

import trio

from ddsup.run._held_signals import ALWAYS_WATCHED
from ddsup.run._held_signals import STOP_SIGNALS as STOP_SIGNALS


def ignore_stop_signals() -> None:
    """Until a receiver watches them, stop signals do nothing."""
    for stop in STOP_SIGNALS:
        signal.signal(stop, signal.SIG_IGN)


def run_signal_receiver(forwarded: Set[int]) -> AbstractContextManager[AsyncIterator[int]]:
    """``ddsup start``'s signals: the stop signals, those its units forward, and SIGUSR1/2
    even when no unit wants them (their default action would kill ``ddsup start``).

    Opened once trio runs (``_takeover``), after the agents were launched: what arrived
    before was held (``_held_signals``) and is released into it, to wait for
    :func:`watch_signals` with whatever arrives while the controller is still starting.
    Not set to "ignore" first (a signal would be lost in between): the held handlers are
    what it replaces, and what it puts back when it closes, and they drop what comes.
    """
    return trio.open_signal_receiver(*STOP_SIGNALS, *forwarded, *ALWAYS_WATCHED)


async def watch_signals(
    signals: AsyncIterator[int],
    forwarded: Set[int],
    forward: Callable[[int], None],
    stop: Callable[[int], None],
) -> None:
    """``ddsup start``'s signals (:func:`run_signal_receiver`) until cancelled: those a
    unit forwards (``forward``), and the stop signals (``stop``)."""
    async for signum in signals:
        if signum in forwarded:
            forward(signum)
        elif signum in STOP_SIGNALS:
            stop(signum)


@contextmanager
def stop_signal_receiver(*others: int) -> Iterator[AsyncIterator[int]]:
    """The stop signals and ``others`` as they arrive; stop signals ignored afterwards."""
    ignore_stop_signals()
    with trio.open_signal_receiver(*STOP_SIGNALS, *others) as signals:
        yield signals
