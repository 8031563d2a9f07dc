"""How states and durations look to a person: the symbol and colour of each state.

The live console of ``ddsup start`` and the table of ``ddsup status`` both use these, so
a state looks the same wherever it is shown.
"""

from __future__ import annotations

_SYMBOLS = {
    "ready": "●",
    "starting": "◐",
    "waiting": "○",
    "restarting": "↻",
    "stopping": "◑",
    "exited": "○",
    "failed": "✗",
    "inactive": "·",
}
_COLOURS = {
    "ready": "32",
    "failed": "31",
    "restarting": "33",
    "starting": "33",
    "waiting": "33",
    "stopping": "33",
    "exited": "2",
    "inactive": "2",
}


def symbol(state: str) -> str:
    """The one-character mark of a unit state (status tables and the live console)."""
    return _SYMBOLS.get(state, "?")


def paint(state: str, text: str) -> str:
    """``text`` in the colour of ``state`` (ANSI SGR), for terminals only."""
    code = _COLOURS.get(state)
    return f"\x1b[{code}m{text}\x1b[0m" if code else text


def duration(seconds: float) -> str:
    """``42s``, ``3m07s``, ``2h05m``: elapsed times in status and on the console."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
