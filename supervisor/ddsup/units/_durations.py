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
# Spelled-out units ("5 secs", "2 Minutes", "1 day") are refused, with the spelling to use.
_SPELLED = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]+)")
_SPELLED_WHOLE = re.compile(r"(?:\s*\d+(?:\.\d+)?\s*[A-Za-z]+)+\s*")
_UNIT_WORDS = {
    **dict.fromkeys(("ms", "msec", "msecs", "millisecond", "milliseconds", "millis"), "ms"),
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), "s"),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), "m"),
    **dict.fromkeys(("h", "hr", "hrs", "hour", "hours"), "h"),
    **dict.fromkeys(("d", "day", "days"), "d"),
}

DURATION_HELP = 'a string with a unit: "500ms", "2s", "10m", "1h" or "1m30s"'

# Signals that cannot be caught, so forwarding them to a unit would only kill ddsup.
_UNFORWARDABLE = frozenset({signal.SIGKILL, signal.SIGSTOP})


def parse_duration(value: object, *, typical: float | None = None) -> float:
    """Seconds in ``value``; ValueError (with the fix in its message) when it is not one.

    ``typical``: seconds a value of this key usually has (its default), so that a bare
    number is answered with the readings a user most likely meant: ``interval = 250``
    (typical 0.5 s) suggests ``"250ms"`` first, ``timeout_start = 20`` (90 s) ``"20s"``.
    """
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        got = "boolean" if isinstance(value, bool) else _toml_type(value)
        raise ValueError(f"expected a duration ({DURATION_HELP}), got {got}")
    if not isinstance(value, str):
        raise ValueError(
            f"duration {value!r} has no unit; write a string with one: "
            f"{_readings(float(value), typical)} (units: ms, s, m, h)"
        )
    if _BARE_NUMBER.fullmatch(value):
        raise ValueError(
            f'duration "{value}" has no unit; add one: '
            f"{_readings(float(value), typical)} (units: ms, s, m, h)"
        )
    if not _WHOLE.fullmatch(value):
        raise ValueError(_invalid(value))
    seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in _PART.findall(value))
    if not math.isfinite(seconds):
        raise ValueError(f'duration "{value}" is too large')
    return seconds


def _toml_type(value: object) -> str:
    return "array" if isinstance(value, list) else "table" if isinstance(value, dict) else "value"


def _readings(number: float, typical: float | None) -> str:
    """``"250ms" or "250s"``: the two likeliest units for a bare number, best first.

    Likeliest is closest to ``typical`` on a log scale (a key's values span orders of
    magnitude); without one, or for a number that has no logarithm, seconds then ms.
    """
    shown = f"{int(number)}" if number.is_integer() else f"{number:g}"
    if number == 0:
        return '"0s"'
    if typical is None or typical <= 0 or number <= 0 or not math.isfinite(number):
        units = ["s", "ms"]
    else:
        units = sorted(
            _UNIT_SECONDS,
            key=lambda u: abs(math.log(number * _UNIT_SECONDS[u] / typical)),
        )[:2]
    return " or ".join(f'"{shown}{unit}"' for unit in units)


def _invalid(value: str) -> str:
    """The message for a string that is not a duration, with the fix when there is one."""
    if value.strip().startswith("-"):
        return f'invalid duration "{value}": a duration cannot be negative'
    parts = _SPELLED.findall(value)
    if parts and _SPELLED_WHOLE.fullmatch(value):
        fixed = [_respell(number, word) for number, word in parts]
        if all(fixed):
            return f'invalid duration "{value}"; did you mean "{"".join(map(str, fixed))}"?'
    return f'invalid duration "{value}"; use {DURATION_HELP}'


def _respell(number: str, word: str) -> str | None:
    """``("5", "secs")`` → ``"5s"``; days become hours; None for an unknown word."""
    unit = _UNIT_WORDS.get(word.lower())
    if unit == "d":
        hours = float(number) * 24
        return f"{int(hours)}h" if hours.is_integer() else f"{hours:g}h"
    return None if unit is None else f"{number}{unit}"


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
