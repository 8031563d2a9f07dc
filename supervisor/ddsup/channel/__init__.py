"""The control channel: authenticated, typed JSON lines between ddsup's processes.

Agents, the endpoint's lane feed and the operator commands talk to ``ddsup start``
through it. ``_messages`` holds every message, ``_codec`` the one encode/decode pair
(``_typed`` checks each field); ``_channel`` frames and bounds the bytes of one
connection (trio); ``_channel_server`` accepts, bounds and authenticates the connections to
``ddsup start`` (``docs/security.md``) on the socket ``_listener`` binds; ``_heartbeat``
turns an agent connection's silence into its loss; ``_operator_client`` is the operator
commands' blocking one-request client.

Its names are imported when first used (PEP 562, as ``concurrent.futures`` does for its
process pool): ``ddsup status`` then imports neither trio (``_channel``, ``_server``) nor
the run's own messages (``_messages``, ``_codec``), only ``_hello``, ``_operator_messages``
and ``_operator_codec``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ddsup._lazy import lazy_names

if TYPE_CHECKING:
    from ddsup.channel._agent_channel import AgentChannel as AgentChannel
    from ddsup.channel._agent_channel import connect_agent as connect_agent
    from ddsup.channel._agent_codec import prepare_agent_decoding as prepare_agent_decoding
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
    from ddsup.channel._channel import Channel as Channel
    from ddsup.channel._channel import connect_channel as connect_channel
    from ddsup.channel._channel_server import ServerLimits as ServerLimits
    from ddsup.channel._channel_server import serve_channel as serve_channel
    from ddsup.channel._codec import decode as decode
    from ddsup.channel._codec import encode as encode
    from ddsup.channel._codec_rules import line_json as line_json
    from ddsup.channel._heartbeat import Pacemaker as Pacemaker
    from ddsup.channel._heartbeat import Silence as Silence
    from ddsup.channel._heartbeat import receive_within as receive_within
    from ddsup.channel._hello import ADDRESS_ENV as ADDRESS_ENV
    from ddsup.channel._hello import SECRET_ENV as SECRET_ENV
    from ddsup.channel._hello import ChannelError as ChannelError
    from ddsup.channel._hello import Hello as Hello
    from ddsup.channel._hello import Role as Role
    from ddsup.channel._hello import new_secret as new_secret
    from ddsup.channel._lines import LineChannel as LineChannel
    from ddsup.channel._lines import connect_tcp as connect_tcp
    from ddsup.channel._messages import EndpointSetup as EndpointSetup
    from ddsup.channel._messages import LaneDrained as LaneDrained
    from ddsup.channel._messages import LanesChanged as LanesChanged
    from ddsup.channel._messages import LanesUpdate as LanesUpdate
    from ddsup.channel._messages import Message as Message
    from ddsup.channel._messages import ReadyLane as ReadyLane
    from ddsup.channel._messages import merge_changes as merge_changes
    from ddsup.channel._operator_client import request as request
    from ddsup.channel._operator_messages import OperatorMessage as OperatorMessage
    from ddsup.channel._operator_messages import RestartAnswer as RestartAnswer
    from ddsup.channel._operator_messages import RestartOver as RestartOver
    from ddsup.channel._operator_messages import RestartProgress as RestartProgress
    from ddsup.channel._operator_messages import RestartRequest as RestartRequest
    from ddsup.channel._operator_messages import RestartStep as RestartStep
    from ddsup.channel._operator_messages import StatusReply as StatusReply
    from ddsup.channel._operator_messages import StatusRequest as StatusRequest
    from ddsup.channel._operator_messages import StopAnswer as StopAnswer
    from ddsup.channel._operator_messages import StopRequest as StopRequest
    from ddsup.channel._typed import from_json as from_json

_LAZY = {
    "AgentChannel": "ddsup.channel._agent_channel",
    "connect_agent": "ddsup.channel._agent_channel",
    "prepare_agent_decoding": "ddsup.channel._agent_codec",
    "AgentMessage": "ddsup.channel._agent_messages",
    "AgentStopped": "ddsup.channel._agent_messages",
    "EventReport": "ddsup.channel._agent_messages",
    "FailHeld": "ddsup.channel._agent_messages",
    "Heartbeat": "ddsup.channel._agent_messages",
    "Inventory": "ddsup.channel._agent_messages",
    "Kill": "ddsup.channel._agent_messages",
    "PreflightReport": "ddsup.channel._agent_messages",
    "Restart": "ddsup.channel._agent_messages",
    "Resume": "ddsup.channel._agent_messages",
    "Setup": "ddsup.channel._agent_messages",
    "Shutdown": "ddsup.channel._agent_messages",
    "SignalInstances": "ddsup.channel._agent_messages",
    "Signalled": "ddsup.channel._agent_messages",
    "Start": "ddsup.channel._agent_messages",
    "Stop": "ddsup.channel._agent_messages",
    "TakeDown": "ddsup.channel._agent_messages",
    "request": "ddsup.channel._operator_client",
    "Pacemaker": "ddsup.channel._heartbeat",
    "Silence": "ddsup.channel._heartbeat",
    "receive_within": "ddsup.channel._heartbeat",
    "EndpointSetup": "ddsup.channel._messages",
    "LaneDrained": "ddsup.channel._messages",
    "LanesChanged": "ddsup.channel._messages",
    "LanesUpdate": "ddsup.channel._messages",
    "ReadyLane": "ddsup.channel._messages",
    "merge_changes": "ddsup.channel._messages",
    "OperatorMessage": "ddsup.channel._operator_messages",
    "RestartAnswer": "ddsup.channel._operator_messages",
    "RestartOver": "ddsup.channel._operator_messages",
    "RestartProgress": "ddsup.channel._operator_messages",
    "RestartRequest": "ddsup.channel._operator_messages",
    "RestartStep": "ddsup.channel._operator_messages",
    "StatusReply": "ddsup.channel._operator_messages",
    "StatusRequest": "ddsup.channel._operator_messages",
    "StopAnswer": "ddsup.channel._operator_messages",
    "StopRequest": "ddsup.channel._operator_messages",
    "connect_tcp": "ddsup.channel._lines",
    "decode": "ddsup.channel._codec",
    "encode": "ddsup.channel._codec",
    "ChannelError": "ddsup.channel._hello",
    "Hello": "ddsup.channel._hello",
    "Message": "ddsup.channel._messages",
    "Role": "ddsup.channel._hello",
    "ADDRESS_ENV": "ddsup.channel._hello",
    "SECRET_ENV": "ddsup.channel._hello",
    "Channel": "ddsup.channel._channel",
    "LineChannel": "ddsup.channel._lines",
    "connect_channel": "ddsup.channel._channel",
    "new_secret": "ddsup.channel._hello",
    "ServerLimits": "ddsup.channel._channel_server",
    "serve_channel": "ddsup.channel._channel_server",
    "line_json": "ddsup.channel._codec_rules",
    "from_json": "ddsup.channel._typed",
}

__getattr__ = lazy_names(__name__, _LAZY, globals())
