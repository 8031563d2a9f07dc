"""A node agent that dies ends the run with 70 (``unit_failed``, ``agent on NODE``)...

... unless everything on its node says ``on_failure = "continue"``: then its lanes fail
("lost with its node") and the run goes on while every model keeps ``min_ready`` lanes.
Whether it dies while the run goes on or while it stops, the controller records why,
writes ``result.json`` and leaves nothing behind: the lost connection is a cause, never
a crash of ``ddsup start``. An agent that falls silent (a frozen or unreachable node) is
lost after ``--agent-timeout``.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil
import pytest

from support.polls import until
from support.ports import free_port
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


def _agent_of(start_pid: int, node: str) -> int:
    for child in psutil.Process(start_pid).children():
        try:
            argv = child.cmdline()
        except psutil.Error:  # gone, or a zombie not reaped yet
            continue
        if "agent" in argv[2:4] and argv[argv.index("--node") + 1] == node:
            return child.pid
    raise AssertionError(f"no agent for {node}")


def _surviving_units(tmp_path: Path) -> UnitDir:
    """Four lanes on two simulated nodes that may be lost, and an endpoint that needs half."""
    units = UnitDir(tmp_path / "units")
    lane = {"model": "m", "gpus": 1, "replicas": 4, "port": "auto", "stagger": "0s"}
    service = {"on_failure": "continue", "timeout_stop": "2s"}
    units.add("lane@", "lane", ["sleep", "60"], lane=lane, service=service)
    endpoint = {"min_ready": "50%", "port": free_port()}  # not 9000: another suite may hold it
    units.add("endpoint", "endpoint", ["ddsup", "endpoint"], endpoint=endpoint)
    return units


def _lost(events: list[dict[str, object]]) -> dict[object, object]:
    return {
        e["instance"]: e["reason"]
        for e in events
        if e.get("to") == "failed" and str(e.get("reason")).startswith("lost with its node")
    }


@pytest.mark.slow  # two node agents and the endpoint: several seconds
async def test_a_node_whose_lanes_continue_is_lost_and_the_run_goes_on(tmp_path: Path) -> None:
    args = ("--nodes", "2", "--gpus-per-node", "2")
    async with running(_surviving_units(tmp_path), tmp_path / "state", *args) as run:
        await run.wait_ready("lane@0", "lane@1", "lane@2", "lane@3", "endpoint")
        # node0 first: the client's node, whose endpoint the controller runs, not the agent
        first, second = (_agent_of(run.process.pid, node) for node in ("node0", "node1"))
        os.kill(first, signal.SIGKILL)
        events = await run.wait_for(lambda es: len(_lost(es)) == 2)
        assert not [e for e in events if e.get("reason") == "ending"], "the run went on"
        assert [e.get("to") for e in events if e.get("instance") == "endpoint"][-1] == "ready"
        os.kill(second, signal.SIGKILL)
        done = await run.wait()
    assert sorted(_lost(done.events())) == ["lane@0", "lane@1", "lane@2", "lane@3"]
    assert "agent on node0" in str(_lost(done.events())["lane@0"])
    endpoint = [e for e in done.events() if e.get("instance") == "endpoint"]
    assert not [e for e in endpoint if e["event"] == "exit"], "node0's agent took the endpoint"
    assert done.returncode == 70, done.describe()
    result = done.result()
    assert result["cause"]["unit"] == "lanes of m", result
    assert "lanes of m are left" in result["cause"]["reason"], result
    assert "min_ready needs 2" in result["cause"]["reason"], result
    assert "Traceback" not in done.output


def _sentinels(start_pid: int) -> list[psutil.Process]:
    found = []
    for proc in psutil.Process(start_pid).children(recursive=True):
        try:
            if any(arg.endswith("_sentinel.py") for arg in proc.cmdline()):
                found.append(proc)
        except psutil.Error:  # gone, or a zombie not reaped yet
            continue
    return found


@pytest.mark.slow  # two node agents and the endpoint: several seconds
@pytest.mark.parametrize("cgroup", ["auto", "off"])
async def test_a_killed_simulated_node_agent_s_units_are_ended_by_the_controller(
    tmp_path: Path, cgroup: str
) -> None:
    """Simulated nodes' agents run no sentinel of their own (``ddsup start``'s covers the
    machine): when one is SIGKILLed, the controller ends what it ran, at once, with the
    cgroup or (``off``) with the registry and the agent's tag, and the run goes on."""
    args = ("--nodes", "2", "--gpus-per-node", "2")
    env = {"DDSUP_CGROUP": cgroup}
    async with running(_surviving_units(tmp_path), tmp_path / "state", *args, env=env) as run:
        events = await run.wait_ready("lane@0", "lane@1", "lane@2", "lane@3", "endpoint")
        assert len(_sentinels(run.process.pid)) == 1, "one sentinel: ddsup start's"
        lanes = [e["pid"] for e in events if e["event"] == "process" and e.get("node") == "node1"]
        assert len(lanes) == 2, events
        os.kill(_agent_of(run.process.pid, "node1"), signal.SIGKILL)
        await until(
            lambda: not any(psutil.pid_exists(p) for p in lanes), "node1 lanes to end", limit=10
        )
        events = await run.wait_for(lambda es: len(_lost(es)) == 2)
        assert not [e for e in events if e.get("reason") == "ending"], "the run went on"
        run.signal(signal.SIGTERM)
        done = await run.wait()
    assert done.returncode == 143, done.describe()
    assert "Traceback" not in done.output


@pytest.mark.slow  # two node agents: several seconds
async def test_a_silent_agent_is_lost_after_agent_timeout_and_stops_its_lanes(
    tmp_path: Path,
) -> None:
    args = ("--nodes", "2", "--gpus-per-node", "2", "--agent-timeout", "1500ms")
    async with running(_surviving_units(tmp_path), tmp_path / "state", *args) as run:
        events = await run.wait_ready("lane@0", "lane@1", "lane@2", "lane@3", "endpoint")
        frozen, other = (_agent_of(run.process.pid, node) for node in ("node1", "node0"))
        lanes = [e["pid"] for e in events if e["event"] == "process" and e.get("node") == "node1"]
        os.kill(frozen, signal.SIGSTOP)
        try:
            events = await run.wait_for(lambda es: len(_lost(es)) == 2)
        finally:
            os.kill(frozen, signal.SIGCONT)
        # cut off by the controller, the agent stops its lanes once it runs again
        await until(lambda: not any(psutil.pid_exists(p) for p in lanes), "node1's lanes to end")
        assert psutil.Process(other).status() != psutil.STATUS_ZOMBIE
        run.signal(signal.SIGTERM)
        done = await run.wait()
    reason = str(_lost(events)["lane@2"])
    assert "no word from the agent on node1 for 1.5s" in reason, reason
    assert done.returncode == 143, done.describe()
