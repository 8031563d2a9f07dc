"""Start order from the units' own timestamps, ``requires`` propagation, lane stagger.

Each unit appends ``NAME MONOTONIC_NS`` to a shared file as it starts (``stamp.py``) and
is ready only once its line is there, so "started after" is proven by the clock every
process shares, not by sleeps.
"""

from __future__ import annotations

import itertools
import signal
from pathlib import Path
from typing import Any

import pytest

from support.runs import PY, run_start, running
from support.unit_dirs import UnitDir, first_stamp

SLACK = 0.25  # scheduling slack on a loaded CI machine (seconds)


def _stamped(units: UnitDir, name: str, file: Path, type: str, *then: str, **keys: Any) -> None:
    """A unit that stamps ``file`` and is ready once its stamp is there."""
    ready = {"exec": ["grep", "-q", f"^{name} ", str(file)], "interval": "20ms"}
    sections = {"ready": ready} if type == "service" else {}
    units.add(name, type, units.stamp(name, file, *then), **sections, **keys)


async def test_after_chains_are_respected(tmp_path: Path) -> None:
    order = tmp_path / "order"
    units = UnitDir(tmp_path / "units")
    _stamped(units, "a", order, "oneshot", "true")
    _stamped(units, "b", order, "service", "sleep", "60", unit={"after": ["a"]})
    _stamped(units, "c", order, "service", "sleep", "60", unit={"after": ["b"]})
    _stamped(units, "d", order, "service", "sleep", "60", unit={"after": ["a"]})
    _stamped(units, "worker", order, "worker", "true", unit={"after": ["c", "d"]})
    run = await run_start(units, tmp_path / "state")

    assert run.returncode == 0, run.describe()
    at = first_stamp(order)
    assert set(at) == {"a", "b", "c", "d", "worker"}
    assert at["a"] < at["b"] < at["c"] < at["worker"]
    assert at["a"] < at["d"] < at["worker"]
    # the oneshot had exited (completed) before anything after it started
    [completed] = run.transitions("a", "exited")
    assert completed["reason"] == "completed"
    assert completed["time"] <= min(run.times("b", "starting") + run.times("d", "starting"))


async def test_failed_requirement_stops_requirers_and_the_run_goes_on(tmp_path: Path) -> None:
    units = UnitDir(tmp_path / "units")
    wait = units.script("wait_event.py")
    units.add(
        "flaky",
        "service",
        ["sh", "-c", f"'{PY}' '{wait}' dependent ready; exit 1"],
        service={"on_failure": "continue"},
    )
    units.add(
        "dependent", "service", ["sleep", "60"], unit={"after": ["flaky"], "requires": ["flaky"]}
    )
    units.add("bystander", "service", ["sleep", "60"])
    units.add("worker", "worker", [PY, wait, "dependent", "exited"])
    run = await run_start(units, tmp_path / "state")

    assert run.returncode == 0, run.describe()
    assert run.result()["status"] == "ok"
    [failed] = run.transitions("flaky", "failed")
    assert failed["exit"] == {"code": 1}
    [stopping] = run.transitions("dependent", "stopping")
    assert stopping["reason"] == "a required unit failed"
    assert stopping["time"] >= failed["time"]
    # the unrelated unit kept running until the run's own stop sequence
    [worker_end] = run.times("worker", "exited")
    [bystander_stop] = run.times("bystander", "stopping")
    assert bystander_stop >= worker_end


def _lanes(units: UnitDir, stagger: str) -> None:
    lane = {"model": "m", "gpus": 1, "replicas": "auto", "port": "auto", "stagger": stagger}
    units.add("lane@", "lane", ["sleep", "60"], lane=lane)


def _starting(events: list[dict[str, Any]]) -> dict[str, float]:
    return {e["instance"]: e["time"] for e in events if e.get("to") == "starting"}


@pytest.mark.slow  # node agents: a few seconds each
async def test_lanes_on_a_node_start_stagger_apart(tmp_path: Path) -> None:
    units = UnitDir(tmp_path / "units")
    _lanes(units, "200ms")
    async with running(units, tmp_path / "state", "--gpus-per-node", "3") as run:
        events = await run.wait_for(lambda events: len(_starting(events)) == 3)
        run.signal(signal.SIGTERM)
        done = await run.wait()
    assert done.returncode == 143, done.describe()
    at = _starting(events)
    times = [at[f"lane@{i}"] for i in range(3)]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    for gap in gaps:
        assert 0.18 <= gap <= 0.2 + SLACK, gaps


@pytest.mark.slow  # node agents: a few seconds each
async def test_stop_mid_stagger_starts_nothing_new(tmp_path: Path) -> None:
    units = UnitDir(tmp_path / "units")
    _lanes(units, "2s")
    async with running(units, tmp_path / "state", "--gpus-per-node", "3") as run:
        await run.wait_for(lambda events: "lane@0" in _starting(events))
        run.signal(signal.SIGTERM)
        done = await run.wait()
    assert done.returncode == 143, done.describe()
    assert done.result()["status"] == "stopped"
    assert set(_starting(done.events())) == {"lane@0"}
    for late in ("lane@1", "lane@2"):
        states = [e["to"] for e in done.transitions(late)]
        assert states[0] == "waiting"
        assert states[-1] == "exited"
        assert "starting" not in states
