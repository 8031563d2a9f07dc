"""Durations (``"500ms"``, ``"2s"``, ``"1m30s"``) and signal names (``"SIGTERM"``, ``"TERM"``).

Unit files write both as strings so that a reader never has to guess the unit: a bare
``30`` could be seconds or milliseconds, so it is rejected with a hint instead.
"""

from __future__ import annotations

import math
import re
import signal

_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)")
_WHOLE = re.compile(r"(?:\s*\d+(?:\.\d+)?\s*(?:ms|s|m|h))+\s*")
_BARE_NUMBER = re.compile(r"\s*\d+(?:\.\d+)?\s*")

DURATION_HELP = 'a string with a unit: "500ms", "2s", "10m", "1h" or "1m30s"'

# Signals that cannot be caught, so forwarding them to a unit would only kill ddsup.
_UNFORWARDABLE = frozenset({signal.SIGKILL, signal.SIGSTOP})


def parse_duration(value: object) -> float:
    """Seconds in ``value``; ValueError (with the fix in its message) when it is not one."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"expected a duration ({DURATION_HELP})")
    if not isinstance(value, str):
        shown = int(value) if isinstance(value, float) and value.is_integer() else value
        raise ValueError(
            f'duration {value!r} has no unit; write it as a string, e.g. "{shown}s" '
            "(units: ms, s, m, h)"
        )
    if _BARE_NUMBER.fullmatch(value):
        raise ValueError(
            f'duration "{value}" has no unit; add one, e.g. "{value.strip()}s" (units: ms, s, m, h)'
        )
    if not _WHOLE.fullmatch(value):
        raise ValueError(f'invalid duration "{value}"; use {DURATION_HELP}')
    seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in _PART.findall(value))
    if not math.isfinite(seconds):
        raise ValueError(f'duration "{value}" is too large')
    return seconds


def format_duration(seconds: float) -> str:
    """The shortest unit-file spelling of ``seconds`` (for docs and the schema's defaults)."""
    for unit in ("h", "m", "s"):
        count = seconds / _UNIT_SECONDS[unit]
        if count >= 1 and count.is_integer():
            return f"{int(count)}{unit}"
    millis = seconds * 1000
    return f"{int(millis)}ms" if millis.is_integer() else f"{seconds}s"


def signal_names() -> tuple[str, ...]:
    """Every accepted spelling, ``SIGTERM`` and ``TERM`` alike, sorted (for the schema)."""
    names = {s.name for s in signal.Signals}
    return tuple(sorted(names | {n[3:] for n in names}))


def parse_signal(value: object, *, forwardable: bool = False) -> signal.Signals:
    """The signal named ``value`` (``"SIGTERM"`` or ``"TERM"``); ValueError otherwise."""
    if isinstance(value, int):  # bool is an int too
        raise ValueError(f'signals are names, not numbers: write e.g. "SIGTERM", not {value}')
    if not isinstance(value, str):
        raise ValueError('expected a signal name such as "SIGTERM"')
    name = value if value.startswith("SIG") else f"SIG{value}"
    try:
        sig = signal.Signals[name]
    except KeyError:
        raise ValueError(_unknown_signal(value)) from None
    if forwardable and sig in _UNFORWARDABLE:
        raise ValueError(f"{sig.name} cannot be caught, so ddsup cannot forward it")
    return sig


def _unknown_signal(value: str) -> str:
    import difflib

    upper = value.upper()
    candidates = signal_names()
    if upper in candidates:
        return f'unknown signal "{value}"; signal names are upper case: "{upper}"'
    close = difflib.get_close_matches(upper, candidates, n=1)
    hint = f'; did you mean "{close[0]}"?' if close else ' (e.g. "SIGTERM", "SIGINT", "SIGUSR1")'
    return f'unknown signal "{value}"{hint}'
