"""Every connection to ``ddsup start``, by the role its hello names.

- an **agent** first reports what its node has (:class:`Inventory`) and is admitted or
  refused (``_inventory``); admitted, it becomes a :class:`RemoteNode` for as long as its
  connection lasts, gets :class:`Setup` once the run has a plan (which may wait for every
  node's inventory), and its reports become the run's inputs (preflight, events, a stop
  signal it received); when the connection ends, :class:`AgentGone` says how;
- the endpoint's **lane feed** is served by the :class:`LanePublisher`;
- an **operator** (``ddsup status``, ``ddsup stop``) asks for a snapshot or a stop.

A message a peer may not send ends its connection, like one that does not decode.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import trio

from ddsup.channel._channel import Channel
from ddsup.channel._messages import (
    AgentStopped,
    ChannelError,
    EventReport,
    Hello,
    Inventory,
    PreflightReport,
    Role,
    Setup,
    Signalled,
    StatusReply,
    StatusRequest,
    StopAnswer,
    StopRequest,
)
from ddsup.record._status import RunSnapshot
from ddsup.run._lane_feed import LanePublisher
from ddsup.run._nodes import RemoteNode, RunNode
from ddsup.run._run_inputs import (
    AgentGone,
    AgentSignalled,
    Host,
    Input,
    Observed,
    PreflightReported,
    StopRequested,
)


@dataclass
class ControlServer:
    """What the controller lends its connections: inputs in, nodes and answers out."""

    feed: Callable[[Input], None]
    admit: Callable[[str, Inventory], str | None]  # why an agent is refused (None: admitted)
    setup: Callable[[], Awaitable[Setup | None]]  # once there is a plan (None: the run ended)
    snapshot: Callable[[], RunSnapshot]
    stopping: Callable[[], bool]
    nodes: dict[Host, RunNode]
    lanes: LanePublisher

    async def serve(self, channel: Channel, hello: Hello) -> None:
        """One authenticated connection, until it ends (ChannelError: it broke the rules)."""
        if hello.role is Role.AGENT and hello.node is not None:
            await self._agent(channel, hello.node)
        elif hello.role is Role.LANES:
            await self.lanes.serve(channel)
        elif hello.role is Role.CONTROL:
            await self._operator(channel)

    async def _agent(self, channel: Channel, node: str) -> None:
        report = await channel.receive()
        if not isinstance(report, Inventory):
            raise ChannelError(f"the agent on {node} sent no inventory after its hello")
        if self.admit(node, report) is not None:
            return  # refused: the run ends saying why; nothing is sent, nothing is asked
        host, remote = Host(node, agent=True), RemoteNode(node)
        self.nodes[host] = remote
        if self.stopping():  # connected after the stop began: nothing for it to run
            remote.shutdown()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._send_to_agent, remote, channel)
                try:
                    reason = await self._agent_reports(channel, node)
                except ChannelError as err:  # caught in here: a nursery would wrap it
                    reason = f"lost the agent on {node}: {err}"
                nursery.cancel_scope.cancel()
        finally:
            if self.nodes.get(host) is remote:
                del self.nodes[host]
        self.feed(AgentGone(node, reason))

    async def _send_to_agent(self, remote: RemoteNode, channel: Channel) -> None:
        """Setup once the run has a plan, then whatever the run asks of the node, in order."""
        setup = await self.setup()
        if setup is not None:
            try:
                await channel.send(setup)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                return  # the agent is gone: its connection's reader says so
        await remote.send_all(channel)

    async def _agent_reports(self, channel: Channel, node: str) -> str:
        """An agent's reports until it stops; how it went away (ChannelError: broken)."""
        while True:
            message = await channel.receive()
            if message is None or isinstance(message, AgentStopped):
                return f"the agent on {node} went away"
            if isinstance(message, PreflightReport):
                self.feed(PreflightReported(message))
            elif isinstance(message, EventReport):
                self.feed(Observed(message.event))
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
            else:
                raise ChannelError(f"unexpected {message.op!r} message from an operator")
