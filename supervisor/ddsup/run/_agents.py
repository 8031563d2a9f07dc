"""The processes that host the node agents: launched, watched, shut down, killed.

A launcher starts them (one local process per simulated node, or one ``srun`` step for
all); an agent then connects back and becomes a :class:`~ddsup.run._nodes.RemoteNode`.
The processes themselves are owned here: one task waits for each, and its end while the
run is not stopping ends the run.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Collection, Mapping, Sequence

import trio

from ddsup.record._state_dir import StateDir
from ddsup.run._launcher import AgentProcess, Launcher
from ddsup.run._run_inputs import AgentProcessExited, Input

SHUTDOWN_GRACE = 10.0  # for a connected agent to stop its units and exit
TERM_GRACE = 5.0  # then SIGTERM, this long, then SIGKILL


class AgentFleet:
    """Every process hosting agents of one run."""

    def __init__(self, launcher: Launcher, state: StateDir) -> None:
        self.launcher = launcher
        self.state = state
        self.processes: list[AgentProcess] = []

    async def launch(
        self,
        nodes: Sequence[str],
        env: Mapping[str, str],
        nursery: trio.Nursery,
        feed: Callable[[Input], None],
    ) -> None:
        """Start the agents of ``nodes``; a task in ``nursery`` waits for each process."""
        self.processes = await self.launcher.launch(nodes, env, self.state)
        for agent in self.processes:
            nursery.start_soon(self._watch, agent, feed)

    @staticmethod
    async def _watch(agent: AgentProcess, feed: Callable[[Input], None]) -> None:
        status = await agent.process.wait()
        feed(AgentProcessExited(agent.label, status, agent.nodes))

    def kill_unconnected(self, connected: Collection[str]) -> None:
        """SIGKILL the agents that cannot be asked: none of their nodes is connected."""
        for agent in self.processes:
            if not set(agent.nodes) & set(connected):
                agent.process.signal_group(signal.SIGKILL)

    async def shutdown(self, connected: Collection[str], *, killing: bool) -> None:
        """Wait for connected agents to exit (they were told to), then end every process.

        An agent that never connected (a stop during its start-up) has started nothing,
        so waiting for it would only delay the stop: it gets SIGTERM straight away.
        """

        async def finish(agent: AgentProcess) -> None:
            if set(connected) & set(agent.nodes) and not killing:
                with trio.move_on_after(SHUTDOWN_GRACE):
                    await agent.process.wait()
            await agent.process.stop(signal.SIGTERM, TERM_GRACE)

        async with trio.open_nursery() as nursery:
            for agent in self.processes:
                nursery.start_soon(finish, agent)
