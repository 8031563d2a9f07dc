"""A node agent that dies ends the run with 70 (``unit_failed``, ``agent on NODE``).

Whether it dies while the run goes on or while it stops, the controller records why,
writes ``result.json`` and leaves nothing behind: the lost connection is a cause, never
a crash of ``ddsup start``.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import psutil
import pytest

from support import procs
from support.polls import until
from support.runs import PY, running, simulated
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


def _sentinels(pid: int) -> list[int]:
    return [
        p.pid for p in psutil.Process(pid).children() if "_sentinel.py" in " ".join(p.cmdline())
    ]


@pytest.mark.slow  # two node agents and a 6 s stop: ~10 s
async def test_a_local_agent_has_no_sentinel_and_its_node_is_swept_when_it_dies(
    tmp_path: Path,
) -> None:
    """Simulated nodes share ``ddsup start``'s machine and its sentinel; an agent that
    is SIGKILLed has its node's processes (a setsid grandchild too) swept at once, while
    the other node's lane still takes its ``timeout_stop`` to stop."""
    units = UnitDir(tmp_path / "units")
    ignorer = f"exec {PY} {units.script('term_ignorer.py')} {tmp_path}/ready-$DDSUP_NODE"
    lane = {"model": "m", "gpus": 1, "replicas": 2, "port": "auto", "stagger": "0s"}
    units.add(
        "lane@",
        "lane",
        ["bash", "-c", f"setsid sleep 60 & {ignorer}"],
        lane=lane,
        service={"timeout_stop": "6s"},
    )
    async with running(units, tmp_path / "state", *simulated(2, 1)) as run:
        await run.wait_ready("lane@0", "lane@1")
        invocation = json.loads((tmp_path / "state" / "run.json").read_text())["invocation_id"]
        agents = [p for p in psutil.Process(run.process.pid).children() if "agent" in p.cmdline()]
        assert len(agents) == 2 and len(_sentinels(run.process.pid)) == 1
        assert all(_sentinels(agent.pid) == [] for agent in agents)

        def on(node: str) -> set[int]:
            return {pid for pid, n in procs.carrying("DDSUP_NODE").items() if n == node} & set(
                procs.carrying("DDSUP_INVOCATION_ID", invocation)
            )

        assert len(on("node0")) >= 3  # agent, lane, its setsid sleep
        victim = next(a for a in agents if "node0" in a.cmdline())
        victim.kill()
        await until(lambda: not on("node0"), "node0's processes gone", limit=3.0)
        assert on("node1")  # the other node is still stopping (its lane ignores SIGTERM)
        done = await run.wait()
    assert done.returncode == 70, done.describe()
    assert done.result()["cause"]["unit"] == "agent on node0"
