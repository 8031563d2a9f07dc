"""A node agent that dies ends the run with 70 (``unit_failed``, ``agent on NODE``).

Whether it dies while the run goes on or while it stops, the controller records why,
writes ``result.json`` and leaves nothing behind: the lost connection is a cause, never
a crash of ``ddsup start``.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil
import pytest

from support.runs import running
from support.unit_dirs import UnitDir


def _agent_pid(start_pid: int) -> int:
    [agent] = [p for p in psutil.Process(start_pid).children() if "agent" in p.cmdline()[2:4]]
    return agent.pid


def _units(tmp_path: Path) -> UnitDir:
    units = UnitDir(tmp_path / "units")
    lane = {"model": "m", "gpus": 1, "replicas": 1, "port": "auto", "stagger": "0s"}
    units.add("lane@", "lane", ["sleep", "60"], lane=lane)
    return units


@pytest.mark.slow  # a node agent: a few seconds
async def test_an_agent_killed_mid_run_ends_it_70(tmp_path: Path) -> None:
    async with running(_units(tmp_path), tmp_path / "state", "--gpus-per-node", "1") as run:
        await run.wait_ready("lane@0")
        os.kill(_agent_pid(run.process.pid), signal.SIGKILL)
        done = await run.wait()
    assert done.returncode == 70, done.describe()
    result = done.result()
    assert result["status"] == "unit_failed" and result["cause"]["unit"] == "agent on node0"
    assert "Traceback" not in done.output


@pytest.mark.slow  # a node agent: a few seconds
async def test_an_agent_killed_while_stopping_leaves_the_stop_as_the_cause(tmp_path: Path) -> None:
    """The agent is frozen while the stop is sent to it, so when it is killed its socket
    still holds unread bytes and the connection is reset, not closed: a lost agent."""
    async with running(_units(tmp_path), tmp_path / "state", "--gpus-per-node", "1") as run:
        await run.wait_ready("lane@0")
        agent = _agent_pid(run.process.pid)
        os.kill(agent, signal.SIGSTOP)
        run.signal(signal.SIGTERM)
        await run.wait_for(lambda events: any(e.get("reason") == "stopping" for e in events))
        os.kill(agent, signal.SIGKILL)
        done = await run.wait()
    assert done.returncode == 143, done.describe()
    assert done.result()["status"] == "stopped"
    assert "Traceback" not in done.output
