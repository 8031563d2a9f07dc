"""Stop signals, received the same way by ``ddsup start`` and by every node agent.

SIGTERM, SIGINT and SIGHUP ask for a graceful stop; a second one, a stop without grace.
They are set to "ignore" before the receiver opens and stay ignored after it closes:
until the process watches them nothing runs yet that needs stopping, and after it no
longer does (the final sweep, ``result.json``, exit) a late signal must not cut the
cleanup half-way. Children are spawned while the receiver's handlers, not SIG_IGN, are
installed, so they start with the default dispositions.
"""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator, Callable, Iterator, Set
from contextlib import AbstractContextManager, contextmanager

import trio

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def ignore_stop_signals() -> None:
    """Until a receiver watches them, stop signals do nothing."""
    for stop in STOP_SIGNALS:
        signal.signal(stop, signal.SIG_IGN)


def run_signal_receiver(forwarded: Set[int]) -> AbstractContextManager[AsyncIterator[int]]:
    """``ddsup start``'s signals: the stop signals, those its units forward, and SIGUSR1/2
    even when no unit wants them (their default action would kill ``ddsup start``).

    Opened before the agents are launched (``_head_start``): a signal that arrives while
    the controller is still starting waits in the receiver for :func:`watch_signals`.
    """
    return stop_signal_receiver(*forwarded, signal.SIGUSR1, signal.SIGUSR2)


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
