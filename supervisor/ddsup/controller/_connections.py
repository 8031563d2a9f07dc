"""Every connection to ``ddsup start``, by the role its hello names.

- an **agent** first reports what its node has (:class:`Inventory`) and is admitted or
  refused (``_agents.NodeInventory``); admitted, it becomes a :class:`RemoteNode` for as long as its
  connection lasts, gets :class:`Setup` (its node's part of the plan) once the run has a plan (which may wait for every
  node's inventory), and its reports become the run's inputs (preflight, events, a stop
  signal it received); when the connection ends, or the agent says nothing (not even the
  answer to a heartbeat) for ``agent_timeout``, :class:`AgentGone` says how; one
  :class:`Pacemaker` beats on every agent's connection (:meth:`ControlServer.beat`);
- the endpoint's **lane feed** is served by the :class:`LanePublisher`;
- an **operator** (``ddsup status``, ``ddsup stop``, ``ddsup restart``) asks for a
  snapshot, a stop, or a restart (whose progress the controller reports on the same
  connection until it is over).

A message a peer may not send ends its connection, like one that does not decode; so
does an agent's hello for a node that has no agent in the plan or whose agent is already
connected, and a report about an instance its node does not run: an authenticated peer
can break its own connection, never the run's record.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Set
from dataclasses import dataclass, field

import trio

from ddsup.channel import (
    AgentStopped,
    Channel,
    ChannelError,
    EventReport,
    Heartbeat,
    Hello,
    Inventory,
    Pacemaker,
    PreflightReport,
    RestartRequest,
    Role,
    Setup,
    Signalled,
    Silence,
    StatusReply,
    StatusRequest,
    StopAnswer,
    StopRequest,
    receive_within,
)
from ddsup.controller._lane_publisher import LanePublisher
from ddsup.controller._nodes import RemoteNode, RunNode
from ddsup.decide import (
    AgentGone,
    AgentSignalled,
    Host,
    Input,
    Observed,
    PreflightReported,
    StopRequested,
)
from ddsup.record import (
    Contained,
    LivenessFailed,
    ProbeAnswered,
    ProcessExited,
    ProcessStarted,
    RecordedEvent,
    RunSnapshot,
    UnitTransition,
)

# what an agent's services emit: each names one of its instances
_INSTANCE_EVENTS = (UnitTransition, ProcessStarted, ProcessExited, ProbeAnswered, LivenessFailed)


def _of_node(event: RecordedEvent, node: str, instances: Set[str]) -> bool:
    """An agent reports on its own node only: its instances, and its no-orphan layers."""
    if isinstance(event, _INSTANCE_EVENTS):
        return event.instance in instances
    return isinstance(event, Contained) and event.node == node


@dataclass
class ControlServer:
    """What the controller lends its connections: inputs in, nodes and answers out."""

    feed: Callable[[Input], None]
    admit: Callable[[str, Inventory], str | None]  # why an agent is refused (None: admitted)
    setup: Callable[[str], Awaitable[Setup | None]]  # a node's, once there is a plan (None: ended)
    snapshot: Callable[[], RunSnapshot]
    stopping: Callable[[], bool]
    nodes: dict[Host, RunNode]
    lanes: LanePublisher
    agent_instances: Callable[[str], Set[str] | None]  # None: no agent belongs on the node
    # admission (the node's inventory; why refused, None: admitted) is ``admit``'s
    agent_timeout: float  # an agent silent this long is lost (``_heartbeat``)
    restart: Callable[[RestartRequest, Channel], Awaitable[None]]
    pacemaker: Pacemaker = field(init=False)

    def __post_init__(self) -> None:
        self.pacemaker = Pacemaker(self.agent_timeout)

    async def beat(self) -> None:
        """The heartbeats of every agent connection, for as long as the controller serves
        (one task for all of them: ``_heartbeat``)."""
        await self.pacemaker.run()

    async def serve(self, channel: Channel, hello: Hello) -> None:
        """One authenticated connection, until it ends (ChannelError: it broke the rules)."""
        if hello.role is Role.AGENT and hello.node is not None:
            await self._agent(channel, hello.node)
        elif hello.role is Role.LANES:
            await self.lanes.serve(channel)
        elif hello.role is Role.CONTROL:
            await self._operator(channel)

    async def _agent(self, channel: Channel, node: str) -> None:
        report = await receive_within(channel, self.agent_timeout, f"the agent on {node}")
        if not isinstance(report, Inventory):
            raise ChannelError(f"the agent on {node} sent no inventory after its hello")
        if self.admit(node, report) is not None:
            return  # refused: the run ends saying why; nothing is sent, nothing is asked
        host, remote = Host(node, agent=True), RemoteNode(node)
        self.nodes[host] = remote
        if self.stopping():  # connected after the stop began: nothing for it to run
            remote.shutdown()
        try:
            with self.pacemaker.beating(remote.put):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._send_to_agent, remote, channel, node)
                    try:
                        reason = await self._agent_reports(channel, node)
                    except ChannelError as err:  # caught in here: a nursery would wrap it
                        reason = f"lost the agent on {node}: {err}"
                    nursery.cancel_scope.cancel()
        finally:
            if self.nodes.get(host) is remote:
                del self.nodes[host]
        self.feed(AgentGone(node, reason))

    async def _send_to_agent(self, remote: RemoteNode, channel: Channel, node: str) -> None:
        """Setup once the run has a plan, then whatever the run asks of the node, in order."""
        setup = await self.setup(node)
        if setup is not None:
            try:
                await channel.send(setup)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                return  # the agent is gone: its connection's reader says so
        await remote.send_all(channel)

    async def _agent_reports(self, channel: Channel, node: str) -> str:
        """An agent's reports until it stops; how it went away (ChannelError: broken, or
        silent for ``agent_timeout``)."""
        # Preflight blocks the agent (no heartbeats) and has its own bound in the
        # controller (PreflightOver): silence counts only once the agent has reported.
        silence = Silence(f"the agent on {node}")
        return await silence.keep(lambda: self._read_reports(channel, node, silence))

    async def _read_reports(self, channel: Channel, node: str, silence: Silence) -> str:
        while True:
            message = await channel.receive()
            if message is None or isinstance(message, AgentStopped):
                return f"the agent on {node} went away"
            silence.hear()
            if isinstance(message, Heartbeat):
                continue  # its answer to the pacemaker's beat: heard is all it says
            instances = self.agent_instances(node) or frozenset()  # the plan's, once it has one
            if isinstance(message, PreflightReport):
                if message.node != node or not set(message.ports) <= instances:
                    raise ChannelError(f"the agent on {node} reported for another node")
                silence.expect_within(self.agent_timeout)
                self.feed(PreflightReported(message))
            elif isinstance(message, EventReport):
                event = message.event
                if not _of_node(event, node, instances):
                    raise ChannelError(f"the agent on {node} reported an event not of its node")
                self.feed(Observed(event))
            elif isinstance(message, Signalled):
                self.feed(AgentSignalled(node, message.signum))
            else:
                raise ChannelError(f"unexpected {message.op!r} message from an agent")

    async def _operator(self, channel: Channel) -> None:
        while (message := await channel.receive()) is not None:
            if isinstance(message, StatusRequest):
                await channel.send(StatusReply(self.snapshot()))
            elif isinstance(message, StopRequest):
                self.feed(StopRequested())
                await channel.send(StopAnswer())
            elif isinstance(message, RestartRequest):
                await self.restart(message, channel)
            else:
                raise ChannelError(f"unexpected {message.op!r} message from an operator")
