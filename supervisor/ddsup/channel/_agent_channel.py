"""A node agent's connection to the controller: an agent's messages only.

The controller's side of the same connection is a :class:`~ddsup.channel._channel.Channel`
(it reads every message); the agent's reads only what a controller sends an agent
(``_agent_codec``), so that the agent imports neither the endpoint's nor the operators'
messages before its first lane starts.
"""

from __future__ import annotations

import trio

from ddsup.channel._agent_codec import decode_for_agent, encode_agent
from ddsup.channel._agent_messages import AgentMessage
from ddsup.channel._hello import MAX_LINE, Hello
from ddsup.channel._lines import LineChannel, connect_lines


class AgentChannel(LineChannel[AgentMessage]):
    """An agent's end of its connection: the messages of ``_agent_messages`` as JSON lines."""

    def __init__(self, stream: trio.abc.Stream, *, max_line: int = MAX_LINE) -> None:
        super().__init__(stream, encode_agent, decode_for_agent, max_line=max_line)


async def connect_agent(address: str, hello: Hello) -> AgentChannel:
    """Connect to the controller at ``host:port`` and say ``hello``; ChannelError when
    unreachable."""
    return await connect_lines(address, hello, AgentChannel)
