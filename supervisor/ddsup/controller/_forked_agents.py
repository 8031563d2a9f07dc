"""The controller adopts the local agents that the agents' forker forked (``_agent_forker``).

The forker names each agent on its stdout (``NODE PID``) and exits; its agents are then
``ddsup start``'s children (it is a child subreaper), and each becomes an
:class:`~ddsup.controller._launcher.AgentProcess` of its own, watched like an exec'd agent:
its exit is its node's (``AgentFleet``). This runs in ``_takeover`` before the
containment's reaper starts, which would otherwise reap an agent that has already
exited before the fleet sees its status.

A forker that does not report every node within ``limit`` seconds is killed; the nodes
it did not name have no agent, and the start fails (``PreflightError``: exit 69) with
the forker's log named, where its error is.
"""

from __future__ import annotations

import os
import signal
from contextlib import suppress

import trio

from ddsup._errors import PreflightError
from ddsup._exit import ExitStatus
from ddsup.agent import parse_report
from ddsup.controller._launcher import AgentProcess, ForkedAgents
from ddsup.process import AdoptedProcess, ReparentedChild, adopt


async def adopt_forked(
    forked: ForkedAgents, limit: float
) -> tuple[list[AgentProcess], PreflightError | None]:
    """Each agent the forker reported, adopted; the error for nodes it did not report."""
    report, in_time = await _read_report(forked, limit)
    forker = AdoptedProcess(forked.forker)
    if not in_time:
        with suppress(ProcessLookupError):
            os.kill(forked.forker.pid, signal.SIGKILL)
    status = ExitStatus.from_returncode(await forker.wait())
    pids = parse_report(report)
    agents = [
        AgentProcess(
            f"agent on {node}",
            (node,),
            adopt(ReparentedChild(pids[node], forked.agent_argv(node)), forked.agent_env(node)),
        )
        for node in forked.nodes
        if node in pids
    ]
    missing = [node for node in forked.nodes if node not in pids]
    if not missing:
        return agents, None
    why = f"did not fork them within {limit:g}s" if not in_time else f"ended ({status.describe()})"
    return agents, PreflightError(
        f"no agent started on node(s) {', '.join(missing)}: the agents' forker {why}"
        f" (see {os.fspath(forked.log)})"
    )


async def _read_report(forked: ForkedAgents, limit: float) -> tuple[bytes, bool]:
    """The forker's stdout until it closes it; False when ``limit`` passed first."""
    pipe = forked.forker.stdout
    assert pipe is not None
    stream = trio.lowlevel.FdStream(os.dup(pipe.fileno()))
    pipe.close()
    report = bytearray()
    async with stream:
        with trio.move_on_after(limit):
            while chunk := await stream.receive_some():
                report += chunk
            return bytes(report), True
    return bytes(report), False
