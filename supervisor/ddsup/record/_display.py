"""How states and durations look to a person: the symbol and colour of each state.

The live console of ``ddsup start`` and the table of ``ddsup status`` both use these, so
a state looks the same wherever it is shown.
"""

from __future__ import annotations

from ddsup.record._states import InstanceState as S

_SYMBOLS = {
    S.READY: "●",
    S.UNRESPONSIVE: "◌",
    S.STARTING: "◐",
    S.WAITING: "○",
    S.RESTARTING: "↻",
    S.STOPPING: "◑",
    S.EXITED: "○",
    S.FAILED: "✗",
    S.INACTIVE: "·",
}
_COLOURS = {
    S.READY: "32",
    S.UNRESPONSIVE: "31",
    S.FAILED: "31",
    S.RESTARTING: "33",
    S.STARTING: "33",
    S.WAITING: "33",
    S.STOPPING: "33",
    S.EXITED: "2",
    S.INACTIVE: "2",
}


def symbol(state: S) -> str:
    """The one-character mark of a unit state (status tables and the live console)."""
    return _SYMBOLS[state]


def paint(state: S, text: str) -> str:
    """``text`` in the colour of ``state`` (ANSI SGR), for terminals only."""
    return f"\x1b[{_COLOURS[state]}m{text}\x1b[0m"


def duration(seconds: float) -> str:
    """``42s``, ``3m07s``, ``2h05m``: elapsed times in status and on the console."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def human_duration(seconds: float) -> str:
    """A duration as a person reads it: ``96ms``, ``2.2s``, ``45s``, ``1m15s``, ``2h05m``.

    For delays and limits in messages (``restart in 96ms``, ``within 20m``), where
    ``0.0959s`` would make the reader do the arithmetic; elapsed times use :func:`duration`.
    """
    seconds = max(0.0, seconds)
    if round(seconds * 1000) < 1000:
        return f"{round(seconds * 1000)}ms"
    if seconds < 10 and round(seconds, 1) != round(seconds):
        return f"{seconds:.1f}s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        minutes, rest = divmod(whole, 60)
        return f"{minutes}m{rest:02d}s" if rest else f"{minutes}m"
    hours, rest = divmod(whole, 3600)
    return f"{hours}h{rest // 60:02d}m" if rest // 60 else f"{hours}h"
