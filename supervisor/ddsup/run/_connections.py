"""Every connection to ``ddsup start``, by the role its hello names.

- an **agent** gets :class:`Setup` (its node's part of the plan), becomes a
  :class:`RemoteNode` for as long as its connection lasts, and its reports become the
  run's inputs (preflight, events, a stop signal it received); when the connection ends,
  :class:`AgentGone` says how;
- the endpoint's **lane feed** is served by the :class:`LanePublisher`;
- an **operator** (``ddsup status``, ``ddsup stop``) asks for a snapshot or a stop.

A message a peer may not send ends its connection, like one that does not decode.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import trio

from ddsup.channel._channel import Channel
from ddsup.channel._messages import (
    AgentStopped,
    ChannelError,
    EventReport,
    Hello,
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
    setup: Callable[[str], Setup]  # what the agent of a node is told
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
        await channel.send(self.setup(node))
        host, remote = Host(node, agent=True), RemoteNode(node)
        self.nodes[host] = remote
        if self.stopping():  # connected after the stop began: nothing for it to run
            remote.shutdown()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(remote.send_all, channel)
                try:
                    reason = await self._agent_reports(channel, node)
                except ChannelError as err:  # caught in here: a nursery would wrap it
                    reason = f"lost the agent on {node}: {err}"
                nursery.cancel_scope.cancel()
        finally:
            if self.nodes.get(host) is remote:
                del self.nodes[host]
        self.feed(AgentGone(node, reason))

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
