"""How states and durations look to a person: the symbol and colour of each state.

The live console of ``ddsup start`` and the table of ``ddsup status`` both use these, so
a state looks the same wherever it is shown.
"""

from __future__ import annotations

from ddsup.record._states import InstanceState as S

_SYMBOLS = {
    S.READY: "●",
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


def span(seconds: float) -> str:
    """``100ms``, ``1.5s``, ``42s``, ``1m58s``, ``4m``, ``1h05m``: a duration as a person
    writes it, in the reasons ddsup gives (restart delays, ``timeout_start``)."""
    if seconds <= 0:
        return "0s"
    if seconds < 1:
        return f"{max(1, round(seconds * 1000))}ms"
    if seconds < 10:
        return f"{seconds:.1f}".rstrip("0").rstrip(".") + "s"
    total = round(seconds)
    if total < 60:
        return f"{total}s"
    if total < 3600:
        minutes, rest = divmod(total, 60)
        return f"{minutes}m{rest:02d}s" if rest else f"{minutes}m"
    hours, rest = divmod(total, 3600)
    return f"{hours}h{rest // 60:02d}m" if rest // 60 else f"{hours}h"
