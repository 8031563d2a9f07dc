"""Restart policy: the start limit, and backoff delays (doubling, capped, ±10 % jitter).

The start count comes from lines the unit appends to a file each time it starts. Exact
backoff values are checked in-process on :class:`ddsup.service._service.Service` (its
:class:`~ddsup.service._restart_policy.RestartPolicy`) under the
autojump clock (the jitter pinned to its extremes); the subprocess run checks the same
rule end to end from ``events.jsonl`` timestamps, with scheduling slack.
"""

from __future__ import annotations

import math
import os
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import trio

from ddsup.record._events import RecordedEvent, UnitTransition
from ddsup.record._states import InstanceState
from ddsup.service import _restart_policy
from ddsup.service._service import Service, ServiceSpec
from ddsup.units._model import Restart, ServiceSection, SourceLocation, Unit, UnitType
from support.runs import run_start
from support.unit_dirs import UnitDir

SLACK = 0.25  # scheduling slack on a loaded CI machine (seconds)


@pytest.mark.parametrize(("restart", "exit_code"), [("always", 0), ("on-failure", 1)])
async def test_start_limit_burst_stops_restarts_for_good(
    tmp_path: Path, restart: str, exit_code: int
) -> None:
    starts = tmp_path / "starts"
    units = UnitDir(tmp_path / "units")
    service = {
        "restart": restart,
        "restart_sec": "100ms",
        "restart_max_sec": "250ms",
        "start_limit_burst": 3,
        "start_limit_interval": "10m",
    }
    units.add(
        "flappy",
        "service",
        # short-lived (no Python): staying up for restart_max_sec would reset the backoff
        ["sh", "-c", f'echo start >> "$0"; exit {exit_code}', str(starts)],
        service=service,
    )
    units.add("worker", "worker", ["sleep", "60"], unit={"after": ["flappy"]})
    run = await run_start(units, tmp_path / "state")

    assert run.returncode == 70, run.describe()
    assert starts.read_text().count("start") == 3, "must start exactly start_limit_burst times"
    result = run.result()
    assert result["status"] == "unit_failed"
    assert result["cause"]["unit"] == "flappy"
    assert "start limit" in result["cause"]["reason"]
    assert len(run.transitions("flappy", "starting")) == 3
    assert run.transitions("flappy")[-1]["to"] == "failed"
    # the backoff between the starts: restart_sec, then doubled (exact values: below)
    restarting = run.times("flappy", "restarting")
    starting = run.times("flappy", "starting")[1:]
    gaps = [b - a for a, b in zip(restarting[: len(starting)], starting, strict=True)]
    assert len(gaps) == 2
    assert 0.09 <= gaps[0] <= 0.11 + SLACK, gaps
    assert 0.18 <= gaps[1] <= 0.22 + SLACK, gaps


def _unit(argv: tuple[str, ...] = ("sh", "-c", "exit 1"), **service: Any) -> Unit:
    return Unit(
        name="flappy",
        type=UnitType.SERVICE,
        service=ServiceSection(exec=argv, **service),
        source=SourceLocation("flappy.toml"),
    )


Beside = Callable[[Service, trio.MemoryReceiveChannel[int]], Awaitable[None]]


async def _delays(tmp_path: Path, unit: Unit, beside: Beside | None = None) -> list[float]:
    """Run the service until its start limit; the restarting → starting gaps (trio time).

    ``beside(service, readies)`` runs next to it; ``readies`` receives the number of each
    start that becomes ready (1, 2, …), and ends with the service.
    """
    marks: list[tuple[float, RecordedEvent]] = []
    send_ready, readies = trio.open_memory_channel[int](math.inf)

    def emit(event: RecordedEvent) -> None:
        marks.append((trio.current_time(), event))
        if isinstance(event, UnitTransition) and event.to_state is InstanceState.READY:
            send_ready.send_nowait(service.status.restarts + 1)

    spec = ServiceSpec(
        instance="flappy",
        node="node0",
        unit=unit,
        argv=unit.service.exec,
        env={"PATH": "/usr/bin:/bin"},
        cwd=str(tmp_path),
        log_path=tmp_path / "flappy.log",
        context={},
    )
    service = Service(spec, emit)
    async with trio.open_nursery() as nursery:
        if beside is not None:
            nursery.start_soon(beside, service, readies)
        with send_ready:
            await service.run()
    assert service.status.state is InstanceState.FAILED
    gaps = []
    restarting_at = None
    for at, event in marks:
        if not isinstance(event, UnitTransition):
            continue
        if event.to_state is InstanceState.RESTARTING:
            restarting_at = at
        elif event.to_state is InstanceState.STARTING and restarting_at is not None:
            gaps.append(at - restarting_at)
    return gaps


CAP = 5.0
BACKOFF: dict[str, Any] = {
    "restart": Restart.ON_FAILURE,
    "restart_sec": 1.0,
    "restart_max_sec": CAP,
    "start_limit_burst": 6,
    "start_limit_interval": 3600.0,
}
BASES = [1.0, 2.0, 4.0, 5.0, 5.0]  # restart_sec · 2^k, capped at restart_max_sec


def _pinned(pick: Callable[[float, float], float]) -> SimpleNamespace:
    return SimpleNamespace(uniform=pick)


@pytest.mark.parametrize(
    ("pick", "factor"),
    [(lambda lo, hi: hi, 1.1), (lambda lo, hi: lo, 0.9), (lambda lo, hi: (lo + hi) / 2, 1.0)],
    ids=["jitter-high", "jitter-low", "jitter-mid"],
)
async def test_backoff_doubles_and_caps_exactly(
    autojump_clock: trio.testing.MockClock,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    pick: Callable[[float, float], float],
    factor: float,
) -> None:
    monkeypatch.setattr(_restart_policy, "random", _pinned(pick))
    gaps = await _delays(tmp_path, _unit(**BACKOFF))
    expected = [min(base * factor, CAP) for base in BASES]
    assert gaps == pytest.approx(expected, abs=1e-9)


async def test_backoff_jitter_stays_within_ten_percent_and_the_cap(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    gaps = await _delays(tmp_path, _unit(**BACKOFF))
    assert len(gaps) == len(BASES)
    for gap, base in zip(gaps, BASES, strict=True):
        assert base * 0.9 - 1e-9 <= gap <= min(base * 1.1, CAP) + 1e-9, (gaps, BASES)


async def test_restart_sec_zero_restarts_at_once(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    gaps = await _delays(tmp_path, _unit(**{**BACKOFF, "restart_sec": 0.0}))
    assert gaps == [0.0] * len(BASES)


@pytest.mark.parametrize("restart_sec", [0.0, 1.0])
def test_a_crash_loop_of_any_length_keeps_its_backoff_within_the_cap(restart_sec: float) -> None:
    """A unit whose crashes never reach the start limit (spaced out by the capped backoff,
    or a large ``start_limit_burst``) restarts for as long as the run lasts: its delay
    stays at the cap however many restarts came before (2^k would overflow a float)."""
    policy = _restart_policy.RestartPolicy(_unit(**{**BACKOFF, "restart_sec": restart_sec}).service)
    delays = [policy.delay(ready_for=0.0) for _ in range(2000)]
    assert max(delays) <= CAP
    assert delays[-1] == (0.0 if restart_sec == 0.0 else pytest.approx(CAP, rel=0.1))


@pytest.mark.parametrize(
    ("ready_for", "expected"),
    [
        (CAP, [1.0, 2.0, 4.0, 1.0, 2.0]),  # ready for restart_max_sec: the backoff starts over
        (CAP / 2, [1.0, 2.0, 4.0, 5.0, 5.0]),  # not long enough: it goes on growing
    ],
    ids=["ready-for-restart-max-sec", "ready-for-less"],
)
async def test_backoff_starts_over_once_the_unit_stayed_ready_for_restart_max_sec(
    autojump_clock: trio.testing.MockClock,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    ready_for: float,
    expected: list[float],
) -> None:
    """A unit that crashes after serving a while restarts after ``restart_sec`` again, not
    after the delay its crash loop of hours ago had reached."""
    monkeypatch.setattr(_restart_policy, "random", _pinned(lambda lo, hi: (lo + hi) / 2))
    unit = _unit(("sleep", "600"), **BACKOFF)

    async def crash(service: Service, readies: trio.MemoryReceiveChannel[int]) -> None:
        """Each start crashes as soon as it is ready, but the fourth, which serves first."""
        async for start in readies:
            if start == 4:
                await trio.sleep(ready_for)
            assert service.status.pid is not None
            os.killpg(service.status.pid, signal.SIGKILL)

    gaps = await _delays(tmp_path, unit, crash)
    assert gaps == pytest.approx(expected, abs=1e-9)
