"""Durations and signal names."""

from __future__ import annotations

import signal

import pytest

from ddsup.units import parse_duration, parse_signal
from ddsup.units._durations import format_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("500ms", 0.5),
        ("2s", 2),
        ("10m", 600),
        ("1h", 3600),
        ("1m30s", 90),
        ("1h 2m 3s", 3723),
        ("0s", 0),
        ("1.5s", 1.5),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (30, 'has no unit; write it as a string, e.g. "30s"'),
        (2.5, 'e.g. "2.5s"'),
        ("30", 'has no unit; add one, e.g. "30s"'),
        ("2 sec", "invalid duration"),
        ("-1s", "invalid duration"),
        ("", "invalid duration"),
        (True, "expected a duration"),
        ([1], "expected a duration"),
    ],
)
def test_bad_durations(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_duration(value)


@pytest.mark.parametrize("seconds", [0.1, 0.5, 2, 90, 120, 600, 3600, 0.0])
def test_format_round_trips(seconds: float) -> None:
    assert parse_duration(format_duration(seconds)) == pytest.approx(seconds)


def test_signals() -> None:
    assert parse_signal("SIGTERM") is signal.SIGTERM
    assert parse_signal("USR1") is signal.SIGUSR1
    assert parse_signal("KILL") is signal.SIGKILL
    with pytest.raises(ValueError, match="cannot forward"):
        parse_signal("SIGKILL", forwardable=True)
    with pytest.raises(ValueError, match='did you mean "SIGTERM"'):
        parse_signal("SIGTREM")
    with pytest.raises(ValueError, match="names, not numbers"):
        parse_signal(9)
