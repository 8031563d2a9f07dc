"""Every message that crosses the control channel (``_codec`` puts them on the wire).

One frozen dataclass per message; on the wire each is one JSON object with an ``op``.
:func:`~ddsup.channel._codec.decode` checks every field's type and raises
:class:`ChannelError` on anything malformed or unknown, and the receiving side then drops
that connection: no other module handles the protocol as dictionaries. Who sends what::

    any peer → controller   Hello (the first line: role, secret)
    agent → controller      Inventory (right after its hello: the node's GPUs)
    controller → agent      Setup, Start, Stop, Restart, SignalInstances, Kill, Shutdown,
                            TakeDown, Resume, FailHeld (a multi-node replica's restart)
    agent → controller      PreflightReport, EventReport, Signalled, AgentStopped
    controller ⇄ agent      Heartbeat (every agent_timeout / 3 from the controller, each
                            answered by the agent: silence means loss; ``_heartbeat``)
    controller → endpoint   EndpointSetup (first), LanesUpdate (every ready lane), then
                            LanesChanged (the lanes that came and went) on every change
    endpoint → controller   LaneDrained (a lane out of the rotation has nothing in flight)
    operator ⇄ controller   StatusRequest → StatusReply; StopRequest → StopAnswer;
                            RestartRequest → RestartAnswer, RestartProgress…, RestartOver
                            (``_operator_messages``, re-exported here)

An agent's messages are ``_agent_messages``' (re-exported here): a node agent imports
only those, and their codec ``_agent_codec``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ddsup.channel._agent_messages import HEARTBEAT as HEARTBEAT
from ddsup.channel._agent_messages import AgentMessage as AgentMessage
from ddsup.channel._agent_messages import AgentStopped as AgentStopped
from ddsup.channel._agent_messages import EventReport as EventReport
from ddsup.channel._agent_messages import FailHeld as FailHeld
from ddsup.channel._agent_messages import Heartbeat as Heartbeat
from ddsup.channel._agent_messages import Inventory as Inventory
from ddsup.channel._agent_messages import Kill as Kill
from ddsup.channel._agent_messages import PreflightReport as PreflightReport
from ddsup.channel._agent_messages import Restart as Restart
from ddsup.channel._agent_messages import Resume as Resume
from ddsup.channel._agent_messages import Setup as Setup
from ddsup.channel._agent_messages import Shutdown as Shutdown
from ddsup.channel._agent_messages import SignalInstances as SignalInstances
from ddsup.channel._agent_messages import Signalled as Signalled
from ddsup.channel._agent_messages import Start as Start
from ddsup.channel._agent_messages import Stop as Stop
from ddsup.channel._agent_messages import TakeDown as TakeDown
from ddsup.channel._hello import MAX_LINE as MAX_LINE
from ddsup.channel._hello import MAX_NAME as MAX_NAME
from ddsup.channel._hello import ChannelError as ChannelError
from ddsup.channel._hello import Hello as Hello
from ddsup.channel._hello import Role as Role
from ddsup.channel._operator_messages import RestartAnswer as RestartAnswer
from ddsup.channel._operator_messages import RestartOver as RestartOver
from ddsup.channel._operator_messages import RestartProgress as RestartProgress
from ddsup.channel._operator_messages import RestartRequest as RestartRequest
from ddsup.channel._operator_messages import RestartStep as RestartStep
from ddsup.channel._operator_messages import StatusReply as StatusReply
from ddsup.channel._operator_messages import StatusRequest as StatusRequest
from ddsup.channel._operator_messages import StopAnswer as StopAnswer
from ddsup.channel._operator_messages import StopRequest as StopRequest
from ddsup.units import EndpointSection


@dataclass(frozen=True)
class EndpointSetup:
    """The ``[endpoint]`` section of the run's endpoint unit (``api_key_env`` is a name)."""

    op: ClassVar[str] = "endpoint"
    section: EndpointSection


@dataclass(frozen=True)
class ReadyLane:
    """One lane in the rotation. ``served_names``: every model name it answers to (its
    ``model`` first, then vLLM aliases and LoRA adapters), for routing by any of them;
    ``api_key_env`` names the variable holding the key to send it (its ``[lane]
    api_key_env``; the endpoint's environment has it)."""

    instance: str
    model: str
    url: str
    served_names: tuple[str, ...] = ()
    api_key_env: str | None = None


@dataclass(frozen=True)
class LanesUpdate:
    """The full set of ready lanes, every model the run serves (``[lane] model``), and
    every name any lane answers to (``served_names``: models, aliases, adapters)."""

    op: ClassVar[str] = "lanes"
    lanes: tuple[ReadyLane, ...] = ()
    models: tuple[str, ...] = ()
    served_names: tuple[str, ...] = ()


@dataclass(frozen=True)
class LaneDrained:
    """The endpoint has ``instance`` out of its rotation and no request in flight to it."""

    op: ClassVar[str] = "drained"
    instance: str


@dataclass(frozen=True)
class LanesChanged:
    """The lanes that joined and left the ready set since the feed's previous message
    (after one full :class:`LanesUpdate`: full sets at every change would be quadratic in
    the lanes of a start)."""

    op: ClassVar[str] = "lanes_changed"
    added: tuple[ReadyLane, ...] = ()
    removed: tuple[str, ...] = ()  # instance names


def merge_changes(changes: Sequence[LanesChanged]) -> LanesChanged:
    """One change with the effect of ``changes`` applied in order.

    The endpoint applies a change's removals, then its additions (``LaneTable.change``):
    a lane that left and came back is in both, one that came and left only in
    ``removed`` (the endpoint ignores an unknown removal), the last URL of a lane wins.
    """
    if len(changes) == 1:
        return changes[0]
    added: dict[str, ReadyLane] = {}
    removed: dict[str, None] = {}  # ordered, without repeats
    for change in changes:
        for instance in change.removed:
            added.pop(instance, None)
            removed[instance] = None
        for lane in change.added:
            added[lane.instance] = lane
    return LanesChanged(added=tuple(added.values()), removed=tuple(removed))


Message = (
    AgentMessage  # an agent's connection (_agent_messages)
    | EndpointSetup
    | LanesUpdate
    | LanesChanged
    | StatusRequest
    | StatusReply
    | StopRequest
    | StopAnswer
    | LaneDrained
    | RestartRequest
    | RestartAnswer
    | RestartProgress
    | RestartOver
)


MESSAGES: tuple[type[Any], ...] = (
    Hello, Inventory, Setup, Heartbeat, Start, Stop, SignalInstances, TakeDown, Resume,
    FailHeld, Kill, Shutdown, PreflightReport, EventReport, Signalled, AgentStopped,
    EndpointSetup, LanesUpdate, LanesChanged, StatusRequest, StatusReply, StopRequest,
    StopAnswer, Restart, LaneDrained, RestartRequest, RestartAnswer, RestartProgress, RestartOver,
)  # fmt: skip
"""Every kind of message, each with a unique ``op`` (``tests/run/test_channel_messages.py``)."""
