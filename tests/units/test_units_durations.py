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
        (30, 'has no unit; write a string with one: "30s" or "30ms"'),
        (2.5, 'one: "2.5s" or "2.5ms"'),
        ("30", 'has no unit; add one: "30s" or "30ms"'),
        (0, r'has no unit; write a string with one: "0s" \('),
        ("2 sec", r'invalid duration "2 sec"; did you mean "2s"\?'),
        ("1 Minute 30 Secs", r'did you mean "1m30s"\?'),
        ("5S", r'did you mean "5s"\?'),
        ("1.5 days", r'did you mean "36h"\?'),
        ("500 millis", r'did you mean "500ms"\?'),
        ("2 fortnights", 'invalid duration "2 fortnights"; use a string with a unit'),
        ("-1s", 'invalid duration "-1s": a duration cannot be negative'),
        ("", "invalid duration"),
        (True, "expected a duration .*, got boolean"),
        ([1], "expected a duration .*, got array"),
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


@pytest.mark.parametrize(
    ("number", "typical", "readings"),
    [
        (250, 0.5, '"250ms" or "250s"'),  # interval = 250: surely milliseconds
        (20, 90.0, '"20s" or "20m"'),  # timeout_start = 20
        (1200, 90.0, '"1200s" or "1200ms"'),
        (600, 600.0, '"600s" or "600m"'),  # upstream_timeout = 600
        (200, 5.0, '"200ms" or "200s"'),  # stagger = 200
        (2, 0.1, '"2s" or "2ms"'),  # restart_sec = 2
    ],
)
def test_a_bare_number_suggests_the_likeliest_units_first(
    number: int, typical: float, readings: str
) -> None:
    with pytest.raises(ValueError, match="has no unit") as info:
        parse_duration(number, typical=typical)
    assert str(info.value) == (
        f"duration {number} has no unit; write a string with one: {readings} (units: ms, s, m, h)"
    )
    with pytest.raises(ValueError, match=f'duration "{number}" has no unit; add one: {readings}'):
        parse_duration(str(number), typical=typical)
