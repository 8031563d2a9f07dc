"""Signals to ``ddsup start``: graceful stop (128+N), a second signal kills at once,
``forward_signals`` reach the unit; and ``timeout_stop`` then SIGKILL in the stop sequence."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from support import procs
from support.polls import until
from support.runs import PY, run_start, running
from support.unit_dirs import UnitDir

# Writes MARKER from its SIGUSR1 handler; says it is armed by creating ARMED.
USR1_CATCHER_PY = """\
import signal, sys, time
marker, armed = sys.argv[1], sys.argv[2]
signal.signal(signal.SIGUSR1, lambda *_: open(marker, "w").close())
open(armed, "w").close()
while True:
    time.sleep(60)
"""


def _ignorer(units: UnitDir, marker: Path, timeout_stop: str) -> None:
    units.add(
        "stubborn",
        "service",
        [PY, units.script("term_ignorer.py"), str(marker)],
        service={"timeout_stop": timeout_stop},
        ready={"exec": ["test", "-e", str(marker)], "interval": "20ms"},
    )


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
async def test_stop_signal_stops_gracefully(tmp_path: Path, signum: int, code: int) -> None:
    units = UnitDir(tmp_path / "units")
    units.add("svc", "service", ["sleep", "60"])
    units.add("worker", "worker", ["sleep", "60"], unit={"after": ["svc"]})
    async with running(units, tmp_path / "state") as run:
        await run.wait_ready("svc", "worker")
        run.signal(signum)
        done = await run.wait()
    assert done.returncode == code, done.describe()
    result = done.result()
    assert result["status"] == "stopped"
    assert result["exit_code"] == code
    assert signal.Signals(signum).name in result["cause"]["reason"]
    for instance in ("svc", "worker"):
        assert [e["to"] for e in done.transitions(instance)][-2:] == ["stopping", "exited"]
    assert done.transitions("svc", "exited")[0]["exit"] == {"signal": "SIGTERM"}
    # reverse order: the worker is down before the service it started after
    assert done.times("worker", "exited")[0] <= done.times("svc", "stopping")[0]


def _agents_of(pid: int) -> list[int]:
    return [
        child
        for child in procs.pids()
        if procs.parent(child) == pid and procs.cmdline(child)[1:4] == ["-m", "ddsup", "agent"]
    ]


@pytest.mark.slow  # a node agent: a few seconds
async def test_stop_signal_while_the_controller_starts_stops_gracefully(tmp_path: Path) -> None:
    """The agents are launched before ``ddsup start`` imports trio and its controller
    (its head start); a SIGTERM then (a scancel during the start-up) is held
    (``agent._held_signals``) until trio's receiver takes it, and the run stops as it would
    later: 143, result.json, no process left (the conftest checks). Without the held
    handlers, the default action killed ``ddsup start`` mid-start (-15)."""
    units = UnitDir(tmp_path / "units")
    lane = {"model": "m", "gpus": 1, "port": "auto"}
    units.add("lane@", "lane", ["sleep", "60"], lane=lane)
    async with running(units, tmp_path / "state", "--gpus-per-node", "1") as run:
        pid = run.process.pid
        # no event says "the agent was spawned": a bounded poll of /proc, signal at once
        await until(lambda: _agents_of(pid), "ddsup start's agent", interval=0.002)
        run.signal(signal.SIGTERM)
        done = await run.wait()
    assert done.returncode == 143, done.describe()
    result = done.result()
    assert (result["status"], result["exit_code"]) == ("stopped", 143), result
    assert "SIGTERM" in result["cause"]["reason"]


async def test_term_ignoring_unit_is_killed_after_timeout_stop(tmp_path: Path) -> None:
    units = UnitDir(tmp_path / "units")
    _ignorer(units, tmp_path / "armed", "300ms")
    units.add("worker", "worker", ["true"], unit={"after": ["stubborn"]})
    run = await run_start(units, tmp_path / "state")
    assert run.returncode == 0, run.describe()
    [stopping] = run.times("stubborn", "stopping")
    [exited] = run.transitions("stubborn", "exited")
    assert 0.3 <= exited["time"] - stopping <= 0.3 + 2.0
    assert exited["exit"] == {"signal": "SIGKILL"}


async def test_second_stop_signal_kills_everything_at_once(tmp_path: Path) -> None:
    units = UnitDir(tmp_path / "units")
    _ignorer(units, tmp_path / "armed", "30s")
    units.add("worker", "worker", ["sleep", "60"], unit={"after": ["stubborn"]})
    async with running(units, tmp_path / "state") as run:
        await run.wait_ready("stubborn", "worker")
        first = time.monotonic()
        run.signal(signal.SIGTERM)
        await run.wait_for(
            lambda events: any(
                e.get("instance") == "stubborn" and e.get("to") == "stopping" for e in events
            )
        )
        run.signal(signal.SIGTERM)
        done = await run.wait(limit=20)
        elapsed = time.monotonic() - first
    assert done.returncode == 143, done.describe()
    assert elapsed < 10, f"took {elapsed:.1f}s: the second SIGTERM did not kill at once"
    assert any("second stop signal" in (e.get("reason") or "") for e in done.events())
    assert done.result()["status"] == "stopped"


async def test_forwarded_signal_reaches_the_unit(tmp_path: Path) -> None:
    units = UnitDir(tmp_path / "units")
    (units.path / "usr1.py").write_text(USR1_CATCHER_PY)
    marker, armed = tmp_path / "got-usr1", tmp_path / "armed"
    units.add(
        "catcher",
        "service",
        [PY, units.script("usr1.py"), str(marker), str(armed)],
        service={"forward_signals": ["SIGUSR1"]},
        ready={"exec": ["test", "-e", str(armed)], "interval": "20ms"},
    )
    units.add("bystander", "service", ["sleep", "60"])  # would die of an unforwarded USR1
    async with running(units, tmp_path / "state") as run:
        await run.wait_ready("catcher", "bystander")
        run.signal(signal.SIGUSR1)
        await until(marker.exists, "the unit's SIGUSR1 marker", limit=10)
        bystander = [e["to"] for e in run.run.transitions("bystander")]
        assert bystander == ["starting", "ready"], "SIGUSR1 reached a unit not forwarding it"
        run.signal(signal.SIGTERM)
        done = await run.wait()
    assert done.returncode == 143, done.describe()
    assert done.transitions("catcher", "exited"), "the catcher kept running after SIGUSR1"
