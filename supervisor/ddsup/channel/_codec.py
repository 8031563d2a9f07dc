"""The one encode/decode pair of the control channel's messages (``_messages``).

:func:`encode` writes a message as one JSON object with its ``op``; :func:`decode` reads
one back, checking every field against its annotation (``_typed``), and raises
:class:`~ddsup.channel._messages.ChannelError` for anything malformed or unknown, and
nothing else, whatever the bytes (``tests/hostile`` holds it to that).
"""

from __future__ import annotations

import dataclasses
import json
import reprlib
from collections.abc import Callable, Mapping
from typing import Any

from ddsup.channel._messages import (
    MESSAGES,
    ChannelError,
    EndpointSetup,
    EventReport,
    Hello,
    LanesChanged,
    LanesUpdate,
    Message,
    ReadyLane,
    Setup,
    StatusReply,
)
from ddsup.channel._typed import from_json
from ddsup.plan._model import Plan
from ddsup.record._event_parse import parse_event
from ddsup.record._status import RunSnapshot
from ddsup.units._model import EndpointSection


# --- encode -------------------------------------------------------------------------------
def encode(message: Message) -> bytes:
    """One message as a JSON line's bytes (without the newline)."""
    return json.dumps({"op": message.op, **_fields(message)}, separators=(",", ":")).encode()


def _fields(message: Message) -> dict[str, Any]:
    if isinstance(message, Setup):
        facts = {f.name: getattr(message, f.name) for f in dataclasses.fields(message)}
        return {**facts, "plan": message.plan.to_dict()}
    if isinstance(message, EventReport):
        return {"event": message.event.to_json()}
    if isinstance(message, StatusReply):
        return {"snapshot": message.snapshot.to_json()}
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
    if isinstance(message, Hello):
        return {k: v for k, v in dataclasses.asdict(message).items() if v is not None}
    return {k: _plain(v) for k, v in dataclasses.asdict(message).items()}


def _lanes(lanes: tuple[ReadyLane, ...]) -> list[dict[str, Any]]:
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


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, Mapping):
        return dict(value)
    return value


# --- decode -------------------------------------------------------------------------------
# What parsing hostile data can raise: json's RecursionError for deep nesting (a
# RuntimeError), LookupError and ArithmeticError from nested records' own parsers.
_PARSE_ERRORS = (
    ArithmeticError,
    AttributeError,
    LookupError,
    TypeError,
    ValueError,
    RecursionError,
)


def decode(line: bytes) -> Message:
    """The message on one line; ChannelError for anything malformed or unknown.

    Lines come from peers that may not have authenticated yet, so nothing a line holds
    may raise anything else: the property test in ``tests/hostile`` holds it to that.
    """
    try:
        data = json.loads(line)
    except (ValueError, RecursionError) as err:
        raise ChannelError(f"malformed message: {_short(err)}") from err
    if not isinstance(data, dict):
        raise ChannelError("malformed message: not an object")
    op = data.pop("op", None)
    kind = _BY_OP.get(op) if isinstance(op, str) else None
    if kind is None:
        raise ChannelError(f"unknown message {reprlib.repr(op)}")
    try:
        return _decode(kind, data)
    except _PARSE_ERRORS as err:
        raise ChannelError(f"malformed {op!r} message: {_short(err)}") from err


def _short(err: BaseException) -> str:
    """An error's text, cut short: it may quote what a hostile peer sent."""
    text = str(err)
    return text if len(text) <= 200 else text[:200] + "…"


def _decode(kind: type[Message], data: dict[str, Any]) -> Message:
    special = _SPECIAL.get(kind)
    if special is not None:
        return special(data)
    return from_json(kind, data)  # type: ignore[no-any-return]


def _setup(data: dict[str, Any]) -> Setup:
    plan = data.get("plan")
    if not isinstance(plan, dict):
        raise ValueError("plan must be an object")
    setup: Setup = from_json(Setup, data, parsers={"plan": Plan.from_dict})
    return setup


def _endpoint_setup(data: dict[str, Any]) -> EndpointSetup:
    section = data.get("section")
    if set(data) != {"section"} or not isinstance(section, dict):
        raise ValueError("it carries one section object")
    return EndpointSetup(from_json(EndpointSection, section))


def _object_parser(parse: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``parse`` for a field that must hold a JSON object (a nested record's own format)."""

    def read(value: Any) -> Any:
        if not isinstance(value, dict):
            raise ValueError(f"expected an object, not {reprlib.repr(value)}")
        return parse(value)

    return read


_SPECIAL: dict[type[Any], Callable[[dict[str, Any]], Message]] = {
    Setup: _setup,
    EndpointSetup: _endpoint_setup,
    EventReport: lambda data: from_json(
        EventReport, data, parsers={"event": _object_parser(parse_event)}
    ),
    StatusReply: lambda data: from_json(
        StatusReply, data, parsers={"snapshot": _object_parser(RunSnapshot.from_json)}
    ),
}
_BY_OP: dict[str, type[Any]] = {kind.op: kind for kind in MESSAGES}
