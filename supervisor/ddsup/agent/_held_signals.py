"""Signals before trio watches them: held, and delivered to trio's receiver later.

``ddsup start`` launches its agents before it imports trio (``_head_start``), so trio's
signal receiver (``_signals``) cannot watch yet while the ``srun`` already runs. A
``scancel`` then must neither kill ``ddsup start`` by the default action (the agents'
step would be left to Slurm) nor be lost: :class:`HeldSignals` installs plain handlers
that only note each signal, and :meth:`HeldSignals.release` hands the noted ones over
once trio's receiver is installed (``_takeover``), which then sees them as if they had
just arrived: a SIGTERM during the start-up stops the run gracefully (143). A node
agent holds its stop signals the same way until its watcher runs (``_agent``): one sent
to it alone while it connects stops its node once it can, instead of being lost.

Handlers, not ``SIG_IGN`` and not a blocked mask: children inherit both, and the agents'
``srun`` must start with the default dispositions (handlers are reset by ``exec``).
After the release, the handlers drop what arrives (trio's receiver has replaced them
until it closes, and puts them back then: a late signal must not cut the clean-up).
"""

from __future__ import annotations

import signal
from collections.abc import Iterable
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# watched even when no unit forwards them: their default action would kill ddsup start
ALWAYS_WATCHED = (signal.SIGUSR1, signal.SIGUSR2)


class HeldSignals:
    """Signals noted since :meth:`hold`, in order, until :meth:`release`."""

    def __init__(self, signals: Iterable[int]) -> None:
        self.signals = tuple(dict.fromkeys(signals))
        self._held: list[int] | None = None
        self._before: dict[int, signal._HANDLER] = {}

    def hold(self) -> None:
        """From now on, these signals are noted instead of acted on."""
        self._held = []
        for signum in self.signals:
            self._before[signum] = signal.signal(signum, self._note)

    def _note(self, signum: int, _frame: FrameType | None) -> None:
        if self._held is not None:
            self._held.append(signum)

    def release(self) -> None:
        """Deliver the noted signals again (to whatever handles them now: trio's receiver,
        installed by the caller first); from now on, drop them."""
        held, self._held = self._held or [], None
        for signum in held:
            signal.raise_signal(signum)

    def restore(self) -> None:
        """The handlers from before :meth:`hold` (a start-up that failed before trio ran)."""
        self._held = None
        for signum, handler in self._before.items():
            signal.signal(signum, handler)
        self._before = {}


def held_signals(forwarded: Iterable[int]) -> HeldSignals:
    """The signals ``ddsup start`` watches, held: the stop signals, those its units
    forward, and SIGUSR1/2 even when no unit wants them (their default action would kill
    ``ddsup start``)."""
    return HeldSignals((*STOP_SIGNALS, *forwarded, *ALWAYS_WATCHED))
