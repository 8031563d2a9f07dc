"""Local agents forked from one import (``agent._agent_forker``), adopted by ``ddsup start``.

What a user relies on is that each simulated node still has an agent of its own: a child
of ``ddsup start``, named by its node in ``ps``, marked with the run's id where the
sweeps look (``/proc/PID/environ``), giving its node's environment to its lanes, with its
own log and exit status; and that a forker that fails says so and which nodes it left
without an agent. The oracles are the kernel's views (``/proc``, ``waitpid``), not what
ddsup says about its processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import trio

from ddsup._errors import PreflightError
from ddsup.controller._forked_agents import adopt_forked
from ddsup.controller._launcher import ForkedAgents
from support import procs
from support.runs import running
from support.unit_dirs import UnitDir

PY = sys.executable


@pytest.mark.slow  # three simulated nodes
async def test_each_simulated_node_has_its_own_agent_a_child_of_ddsup_start(
    tmp_path: Path,
) -> None:
    units = UnitDir(tmp_path / "units")
    lane = {"model": "m", "gpus": 1, "replicas": "auto", "port": "auto", "stagger": "0s"}
    units.add("lane@", "lane", ["sleep", "60"], lane=lane)
    state = tmp_path / "state"
    async with running(units, state, "--nodes", "3", "--gpus-per-node", "1") as run:
        await run.wait_ready("lane@0", "lane@1", "lane@2")
        invocation = json.loads((state / "run.json").read_text())["invocation_id"].encode()
        start = psutil.Process(run.process.pid)
        agents: dict[str, psutil.Process] = {}
        for child in start.children():
            words = [w for w in child.cmdline() if w]
            if words[1:4] == ["-m", "ddsup", "agent"]:
                agents[words[words.index("--node") + 1]] = child
        assert sorted(agents) == ["node0", "node1", "node2"]
        assert not [p for p in start.children(recursive=True) if "agents" in p.cmdline()]
        for node, agent in agents.items():
            assert procs.environ(agent.pid)[b"DDSUP_INVOCATION_ID"] == invocation
            assert os.getpgid(agent.pid) == agent.pid  # its own group: signals its own
            [lane] = agent.children()
            assert procs.environ(lane.pid)[b"DDSUP_NODE"] == node.encode()
            assert (state / "logs" / f"agent-{node}.log").exists()
        # one session for all of them, not ddsup start's: Linux shares the CPU between
        # sessions (autogroups) first, so 128 simulated nodes count once against the
        # controller instead of 128 times; the kernel's own view says so
        sessions = {os.getsid(agent.pid) for agent in agents.values()}
        assert len(sessions) == 1 and os.getsid(start.pid) not in sessions
        groups = {_autogroup(pid) for pid in [start.pid, *(a.pid for a in agents.values())]}
        assert None in groups or len(groups) == 2, groups
    assert run.process.returncode == 143  # SIGTERM: the run stopped, agents included
    assert not [a for a in agents.values() if procs.alive(a.pid)]


def _autogroup(pid: int) -> str | None:
    """The scheduler's autogroup of ``pid`` ("/autogroup-N"), None without autogroups.

    The file is absent on kernels built without autogroups and empty for a process in a
    cpu cgroup of a container (there the cgroup, not the session, is the scheduling
    group: the kernel shows no autogroup, as on CI's machine)."""
    try:
        words = Path(f"/proc/{pid}/autogroup").read_text().split()
    except OSError:
        return None
    return words[0] if words else None


FORK_AND_WAIT = """
import json, os, subprocess, sys
from ddsup.process._subreaper_flag import become_subreaper
from ddsup.agent._agent_forker import parse_report
become_subreaper()  # as ddsup start is: the forked agents become ours when it exits
logs = {n: os.open(sys.argv[1] + "/" + n + ".log", os.O_WRONLY | os.O_CREAT, 0o600)
        for n in ("a", "b")}
spec = {"nodes": {n: {"log_fd": fd, "env": {"DDSUP_NODE": n}} for n, fd in logs.items()},
        "units": None}
forker = subprocess.Popen(
    [sys.executable, "-m", "ddsup", "agents", "--node", "a", "--node", "b"],
    stdin=subprocess.PIPE, stdout=subprocess.PIPE, pass_fds=tuple(logs.values()),
)
report, _ = forker.communicate(json.dumps(spec).encode())
pids = parse_report(report)
statuses = {n: os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for n, pid in pids.items()}
print(json.dumps({"forker": forker.returncode, "agents": statuses}))
"""


def test_the_forker_runs_each_agent_with_its_own_log_and_exit_status(tmp_path: Path) -> None:
    """Agents started by hand (no secret, no address): each says so in its own log and
    exits 64, as ``python -m ddsup agent`` does; the forker exits 0 having named both."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DDSUP_")}
    done = subprocess.run(
        [PY, "-c", FORK_AND_WAIT, str(tmp_path)],
        capture_output=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    outcome = json.loads(done.stdout)
    assert outcome == {"forker": 0, "agents": {"a": 64, "b": 64}}
    for node in ("a", "b"):
        said = (tmp_path / f"{node}.log").read_text()
        assert "ddsup agent is started by ddsup start, not by hand" in said
        assert "Traceback" not in said


def _forker(tmp_path: Path, code: str) -> ForkedAgents:
    """A stand-in forker: a real process whose stdout is the report, running ``code``."""
    popen = subprocess.Popen(
        [PY, "-c", code], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, start_new_session=True
    )
    nodes = ("n1", "n2")
    own = {n: {"DDSUP_NODE": n} for n in nodes}
    return ForkedAgents(nodes, popen, {}, own, (), tmp_path / "agents.log")


async def test_a_forker_that_ends_without_forking_names_the_nodes_and_its_log(
    tmp_path: Path,
) -> None:
    forked = _forker(tmp_path, "import sys; sys.exit(3)")
    agents, failed = await adopt_forked(forked, limit=30)
    assert agents == []
    assert isinstance(failed, PreflightError) and failed.exit_status == 69
    assert str(failed) == (
        "no agent started on node(s) n1, n2: the agents' forker ended (exit status 3)"
        f" (see {tmp_path / 'agents.log'})"
    )
    assert forked.forker.returncode == 3  # reaped


async def test_a_forker_that_hangs_is_killed_after_the_limit(tmp_path: Path) -> None:
    forked = _forker(tmp_path, "import time; time.sleep(600)")
    with trio.fail_after(20):
        agents, failed = await adopt_forked(forked, limit=0.5)
    assert agents == []
    assert failed is not None and "did not fork them within 0.5s" in str(failed)
    assert forked.forker.returncode == -9  # SIGKILLed and reaped: nothing left
