"""An agent's side of the codec: the messages of an agent's connection on the wire.

:func:`encode_agent` writes any of them (``_codec.encode`` writes them through it: the
same bytes whoever sends); :func:`decode_for_agent` reads only what a controller sends an
agent (``TO_AGENT``), so that a node agent imports neither the endpoint's nor the
operators' messages, nor what those carry (the run's status, the events' parser): less
to create before its first lane starts. Anything else on an agent's connection breaks
the protocol (:class:`~ddsup.channel._hello.ChannelError`), as any line that does not
decode does.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypedDict

from ddsup._json import Json
from ddsup.channel._agent_messages import (
    HEARTBEAT,
    TO_AGENT,
    AgentMessage,
    EventReport,
    Heartbeat,
    Setup,
)
from ddsup.channel._codec_rules import Decoder, decode_with, encode_fields, line_json
from ddsup.channel._typed import from_json, prepare
from ddsup.plan import Plan
from ddsup.record import NodeEventLine

# A heartbeat's line, written and read without json: every idle agent connection carries
# one each way per beat, and they are most of what an idle controller does.
HEARTBEAT_LINE = b'{"op":"heartbeat"}'


class EventReportJson(TypedDict):
    """An :class:`EventReport`'s field: the event in its ``events.jsonl`` line's shape."""

    event: NodeEventLine


def encode_agent(message: AgentMessage) -> bytes:
    """One message of an agent's connection as a JSON line's bytes (no newline)."""
    if isinstance(message, Heartbeat):
        return HEARTBEAT_LINE
    fields = agent_fields(message)
    return line_json({"op": message.op, **fields}).encode()


def agent_fields(message: Any) -> EventReportJson | dict[str, Json]:
    """A message's fields as JSON values: the plan and an event in their own formats."""
    if isinstance(message, Setup):
        facts = {f.name: getattr(message, f.name) for f in dataclasses.fields(message)}
        return {**facts, "plan": message.plan.to_dict()}
    if isinstance(message, EventReport):
        return {"event": message.event.to_json()}
    return encode_fields(message)


def decode_for_agent(line: bytes) -> AgentMessage:
    """What the controller sent an agent; ChannelError for anything else or malformed."""
    if line == HEARTBEAT_LINE:
        return HEARTBEAT
    message: AgentMessage = decode_with(_TO_AGENT_BY_OP, _TO_AGENT_SPECIAL, line)
    return message


def prepare_agent_decoding() -> None:
    """What :func:`decode_for_agent` works out on first use (each message class's shape),
    worked out now: the agents' forker does it once for all the agents it forks."""
    prepare(TO_AGENT)


def decode_setup(data: dict[str, Json]) -> Setup:
    """A :class:`Setup` from its JSON object: its plan in ``Plan.from_dict``'s format."""
    plan = data.get("plan")
    if not isinstance(plan, dict):
        raise ValueError("plan must be an object")
    setup: Setup = from_json(Setup, data, parsers={"plan": Plan.from_dict})
    return setup


_TO_AGENT_SPECIAL: dict[type[Any], Decoder] = {Setup: decode_setup}
_TO_AGENT_BY_OP: dict[str, type[Any]] = {kind.op: kind for kind in TO_AGENT}
