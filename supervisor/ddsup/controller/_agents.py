"""The processes that host the node agents: launched, watched, shut down, killed.

A launcher starts them (one process per simulated node, forked by one forker that
``_forked_agents`` adopts them from, or one ``srun`` step for all), in ``ddsup start``'s
head start (``_head_start``, before trio runs), and the fleet adopts them (``_takeover``
made them trio's processes first); an
agent then connects back and becomes a :class:`~ddsup.controller._nodes.RemoteNode`.
The processes themselves are owned here: one task waits for each, and its end while the
run is not stopping ends the run. Which agents are admitted, and what each reported of its
node, is the fleet's :class:`NodeInventory` (below).

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
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from functools import partial

import trio

from ddsup._errors import PreflightError
from ddsup.channel import Inventory
from ddsup.controller._launcher import AgentProcess, Launcher
from ddsup.decide import AgentProcessExited, Input
from ddsup.plan import GpuList
from ddsup.process import end_on_this_node
from ddsup.record import StateDir
from ddsup.units import printable

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


# --- which agents may join the run, and what each found on its node ------------------------
# Every agent says hello as a node (``SLURMD_NODENAME`` under Slurm, its ``--node`` for a
# simulated one) and reports its node's GPUs at once (:class:`Inventory`). The controller admits it only as a node it launched an agent for, and only
# once: an agent on a node the plan does not know (Slurm calls the node by another name
# than ``scontrol show hostnames`` did) or a second one for the same node is refused, and
# the run ends 69 saying which. When the plan waits for the nodes' GPUs
# (``Allocation.gpus_from_agents``), :attr:`NodeInventory.complete` is set once every
# launched node has reported, and :attr:`found` is what gets placed on.


class NodeInventory:
    """The nodes agents were launched for, and the GPUs each one's agent reported."""

    def __init__(self) -> None:
        self.expected: tuple[str, ...] = ()
        self.found: dict[str, GpuList] = {}
        self.complete = trio.Event()

    def expect(self, nodes: Iterable[str]) -> None:
        """Agents are being launched for ``nodes``."""
        self.expected = tuple(nodes)
        self._check_complete()

    def admit(self, node: str, report: Inventory) -> str | None:
        """Record an agent's inventory; why it is refused (None: admitted)."""
        if node not in self.expected:
            planned = ", ".join(self.expected[:6]) + (", …" if len(self.expected) > 6 else "")
            return (
                f"an agent said hello as node {printable(node)!r}, which is not a node of "
                f"this run ({printable(planned) or 'none launched yet'})"
            )
        if node in self.found:
            return f"a second agent said hello as node {printable(node)!r}"
        self.found[node] = GpuList(report.gpus, report.source)
        self._check_complete()
        return None

    def missing(self) -> tuple[str, ...]:
        return tuple(n for n in self.expected if n not in self.found)

    def _check_complete(self) -> None:
        if self.expected and not self.missing():
            self.complete.set()
