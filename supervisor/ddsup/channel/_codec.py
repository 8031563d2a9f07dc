"""The one encode/decode pair of the control channel's messages (``_messages``).

:func:`encode` writes a message as one JSON object with its ``op``; :func:`decode` reads
one back, checking every field against its annotation (``_typed``), and raises
:class:`~ddsup.channel._messages.ChannelError` for anything malformed or unknown, and
nothing else, whatever the bytes (``tests/hostile`` holds it to that). The rules are
``_codec_rules``'s; the operator's messages are ``_operator_codec``'s (an operator's client
needs only those), an agent's connection's ``_agent_codec``'s (a node agent needs only
those): the same bytes either way. This adds the endpoint's lane feed, and reads all.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypedDict

from ddsup._json import Json
from ddsup.channel._agent_codec import HEARTBEAT_LINE as HEARTBEAT_LINE
from ddsup.channel._agent_codec import EventReportJson, agent_fields, decode_setup
from ddsup.channel._codec_rules import Decoder, decode_with, line_json, object_parser
from ddsup.channel._messages import (
    HEARTBEAT,
    MESSAGES,
    EndpointSetup,
    EventReport,
    Heartbeat,
    LanesChanged,
    LanesUpdate,
    Message,
    ReadyLane,
    Setup,
    StatusReply,
)
from ddsup.channel._operator_codec import OPERATOR_SPECIAL, encode_operator
from ddsup.channel._typed import from_json
from ddsup.record import NODE_EVENTS, NodeEvent, parse_event
from ddsup.units import EndpointSection


# --- encode -------------------------------------------------------------------------------
class ReadyLaneJson(TypedDict):
    """A lane of the endpoint's feed (:class:`ReadyLane`)."""

    instance: str
    model: str
    url: str
    api_key_env: str | None
    served_names: list[str]


class LanesUpdateJson(TypedDict):
    lanes: list[ReadyLaneJson]
    models: list[str]
    served_names: list[str]


class LanesChangedJson(TypedDict):
    added: list[ReadyLaneJson]
    removed: list[str]


MessageFields = LanesUpdateJson | LanesChangedJson | EventReportJson | dict[str, Json]
"""A message's fields as its line holds them, beside its ``op``."""


def encode(message: Message) -> bytes:
    """One message as a JSON line's bytes (without the newline)."""
    if isinstance(message, Heartbeat):
        return HEARTBEAT_LINE
    if isinstance(message, StatusReply):
        return encode_operator(message)
    return line_json({"op": message.op, **_fields(message)}).encode()


def _fields(message: Message) -> MessageFields:
    if isinstance(message, EndpointSetup):
        return {"section": dataclasses.asdict(message.section)}
    if isinstance(message, LanesUpdate):
        return {
            "lanes": _lanes(message.lanes),
            "models": list(message.models),
            "served_names": list(message.served_names),
        }
    if isinstance(message, LanesChanged):
        return {"added": _lanes(message.added), "removed": list(message.removed)}
    return agent_fields(message)  # an agent's messages, a hello, an operator's request


def _lanes(lanes: tuple[ReadyLane, ...]) -> list[ReadyLaneJson]:
    """Lane records by hand: ``dataclasses.asdict`` deep-copies each one, and a feed of
    a thousand lanes wrote a thousand of them per message."""
    return [
        {
            "instance": x.instance,
            "model": x.model,
            "url": x.url,
            "api_key_env": x.api_key_env,
            "served_names": list(x.served_names),
        }
        for x in lanes
    ]


# --- decode -------------------------------------------------------------------------------
def decode(line: bytes) -> Message:
    """The message on one line; ChannelError for anything malformed or unknown.

    Lines come from peers that may not have authenticated yet, so nothing a line holds
    may raise anything else: the property test in ``tests/hostile`` holds it to that.
    """
    if line == HEARTBEAT_LINE:
        return HEARTBEAT
    message: Message = decode_with(_BY_OP, _SPECIAL, line)
    return message


def _endpoint_setup(data: dict[str, Json]) -> EndpointSetup:
    section = data.get("section")
    if set(data) != {"section"} or not isinstance(section, dict):
        raise ValueError("it carries one section object")
    return EndpointSetup(from_json(EndpointSection, section))


def _node_event(data: dict[str, Json]) -> NodeEvent:
    """An event an agent reports: of its node (``NODE_EVENTS``), never the run's own."""
    event = parse_event(data)
    if not isinstance(event, NODE_EVENTS):
        raise ValueError(f"an agent reports its node's events, not a {type(event).__name__}")
    return event


_read_node_event = object_parser(_node_event)


def _event_report(data: dict[str, Json]) -> EventReport:
    """An agent's report of one event: most of what the controller reads in a start, so
    read here field by field, not through ``from_json``'s walk of its annotations."""
    if set(data) != {"event"}:
        raise ValueError("it carries one event object")
    return EventReport(_read_node_event(data["event"]))


_SPECIAL: dict[type[Any], Decoder] = {
    **OPERATOR_SPECIAL,
    Setup: decode_setup,
    EndpointSetup: _endpoint_setup,
    EventReport: _event_report,
}
_BY_OP: dict[str, type[Any]] = {kind.op: kind for kind in MESSAGES}
