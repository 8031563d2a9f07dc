"""``ddsup start`` holds one connection (and a local agent's pidfd) per node agent.

Many clusters give jobs a soft limit of 1,024 open files; ``ddsup start`` raises its own
soft limit to what its run needs, and when the hard limit is too low it says so before
anything starts (69) instead of failing half-way through preflight.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from support.runs import Run, simulated, start_argv, start_env
from support.unit_dirs import UnitDir

NODES = 16  # 16 agents: ~100 open files needed, more than the limit below


def _units(path: Path) -> UnitDir:
    units = UnitDir(path)
    lane = {"model": "m", "gpus": 1, "replicas": "auto", "port": "auto", "stagger": "0s"}
    units.add("lane@", "lane", ["sleep", "60"], lane=lane)
    units.add("worker", "worker", ["true"], unit={"after": ["lane"]})
    return units


async def _run_limited(tmp_path: Path, soft: int, hard: int) -> Run:
    argv = start_argv(_units(tmp_path / "units"), tmp_path / "state", *simulated(NODES, 1))
    limited = ["prlimit", f"--nofile={soft}:{hard}", "--", *argv]
    with trio.fail_after(60):
        done = await trio.run_process(
            limited, env=start_env(), capture_stdout=True, capture_stderr=True, check=False
        )
    output = done.stdout.decode(errors="replace") + done.stderr.decode(errors="replace")
    return Run(tmp_path / "state", done.returncode, output)


@pytest.mark.slow  # 16 node agents: several seconds
async def test_a_low_soft_limit_is_raised_for_the_agents(tmp_path: Path) -> None:
    done = await _run_limited(tmp_path, soft=32, hard=4096)
    assert done.returncode == 0, done.describe()
    assert len(done.transitions("worker", "exited")) == 1


async def test_a_hard_limit_below_what_the_run_needs_is_said_before_anything_starts(
    tmp_path: Path,
) -> None:
    done = await _run_limited(tmp_path, soft=48, hard=48)
    assert done.returncode == 69, done.describe()
    assert "open files in ddsup start" in done.result()["cause"]["reason"]
    assert "hard limit is 48" in done.output and "Traceback" not in done.output
    assert not [e for e in done.events() if e.get("to") == "starting"]
