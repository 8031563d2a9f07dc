"""The processes that host the node agents: launched, watched, shut down, killed.

A launcher starts them (one process per simulated node, forked by one forker that
``_forked_agents`` adopts them from, or one ``srun`` step for all), in ``ddsup start``'s
head start (``_head_start``, before trio runs), and the fleet adopts them (``_takeover``
made them trio's processes first); an
agent then connects back and becomes a :class:`~ddsup.controller._nodes.RemoteNode`.
The processes themselves are owned here: one task waits for each, and its end while the
run is not stopping ends the run. Which agents are admitted, and what each reported of its
node, is the fleet's :class:`~ddsup.controller._inventory.NodeInventory`.

Agents on this machine (simulated nodes) run no sentinel: ``ddsup start``'s covers the
machine if it dies. So when such an agent ends uncleanly (SIGKILL, or any exit but 0:
a clean exit has ended its units itself), the fleet does its sentinel's work: it ends
that agent's share of the run (its cgroup subtree, its registry entries, the processes
tagged ``DDSUP_AGENT=agent-<node>``), within seconds, while the run goes on as its
policy says (``_node_loss``).
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable, Collection, Mapping, Sequence
from functools import partial

import trio

from ddsup._errors import PreflightError
from ddsup.controller._inventory import NodeInventory
from ddsup.controller._launcher import AgentProcess, Launcher
from ddsup.decide import AgentProcessExited, Input
from ddsup.plan import GpuList
from ddsup.process import end_on_this_node
from ddsup.record import StateDir

log = logging.getLogger(__name__)

SHUTDOWN_GRACE = 10.0  # for a connected agent to stop its units and exit
TERM_GRACE = 5.0  # then SIGTERM, this long, then SIGKILL


class AgentFleet:
    """Every process hosting agents of one run."""

    def __init__(self, launcher: Launcher, state: StateDir, invocation_id: str) -> None:
        self.launcher = launcher
        self.state = state
        self.invocation_id = invocation_id
        self.processes: list[AgentProcess] = []
        self.inventory = NodeInventory()

    def adopt(self, nodes: Sequence[str], processes: Sequence[AgentProcess]) -> None:
        """The agents of ``nodes``, launched in ``ddsup start``'s head start (``_head_start``):
        from now on their hellos are expected (``inventory``) and their processes ours."""
        self.inventory.expect(nodes)
        self.processes = list(processes)

    def watch(self, nursery: trio.Nursery, feed: Callable[[Input], None]) -> None:
        """A task in ``nursery`` waits for each process; its end is the run's input."""
        for agent in self.processes:
            nursery.start_soon(self._watch, agent, feed)

    async def gpus(self, limit: float) -> Mapping[str, GpuList]:
        """Every node's GPUs as its agent reported them; PreflightError for nodes whose
        agent did not report within ``limit`` seconds."""
        with trio.move_on_after(limit):
            await self.inventory.complete.wait()
        missing = self.inventory.missing()
        if missing:
            raise PreflightError(
                f"no agent reported from node(s) {', '.join(missing)} within {limit:g}s"
            )
        return self.inventory.found

    async def _watch(self, agent: AgentProcess, feed: Callable[[Input], None]) -> None:
        status = await agent.process.wait()
        feed(AgentProcessExited(agent.label, status, agent.nodes))
        if self.launcher.covers_agents and status.code != 0:
            with trio.CancelScope(shield=True):  # the run may be ending: this still must
                await self._end_share(agent)

    async def _end_share(self, agent: AgentProcess) -> None:
        """What the dead agent's sentinel would have ended (the module docstring)."""
        try:
            records = self.state.open_records()
        except OSError:
            records = None  # no records: the tag sweep still ends what the agent started
        try:
            for node in agent.nodes:
                await self._end_agent(f"agent-{node}", records)
        finally:
            if isinstance(records, int):
                os.close(records)

    async def _end_agent(self, name: str, records: int | str | None) -> None:
        end = partial(end_on_this_node, self.invocation_id, records, names=[name], agent=name)
        ended = await trio.to_thread.run_sync(end)
        if ended.hit or ended.survivors:
            log.warning(
                "%s ended uncleanly: killed %d process(es) it left, %d survived: %s",
                name,
                len(ended.hit),
                len(ended.survivors),
                ended.survivors,
            )

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
