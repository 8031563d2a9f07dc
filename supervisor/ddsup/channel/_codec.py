"""The one encode/decode pair of the control channel's messages (``_messages``).

A message is one JSON object a line with its ``op``. :func:`decode` checks every field's
type against the message's annotations and raises :class:`ChannelError` on anything
malformed or unknown: a peer of an older version may leave fields out (they take their
defaults), but a field nobody knows is never passed over silently.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

from ddsup.channel._messages import (
    MESSAGES,
    ChannelError,
    EndpointSetup,
    EventReport,
    Hello,
    LanesUpdate,
    Message,
    Setup,
    StatusReply,
)
from ddsup.plan._model import Plan
from ddsup.record._events import parse_event
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
        lanes = [dataclasses.asdict(lane) for lane in message.lanes]
        return {"lanes": lanes, "models": list(message.models)}
    if isinstance(message, Hello):
        return {k: v for k, v in dataclasses.asdict(message).items() if v is not None}
    return {k: _plain(v) for k, v in dataclasses.asdict(message).items()}


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, Mapping):
        return dict(value)
    return value


# --- decode -------------------------------------------------------------------------------
def decode(line: bytes) -> Message:
    """The message on one line; ChannelError for anything malformed or unknown."""
    try:
        data = json.loads(line)
    except ValueError as err:
        raise ChannelError(f"malformed message: {err}") from err
    if not isinstance(data, dict):
        raise ChannelError("malformed message: not an object")
    op = data.pop("op", None)
    kind = _BY_OP.get(op) if isinstance(op, str) else None
    if kind is None:
        raise ChannelError(f"unknown message {op!r}")
    try:
        return _decode(kind, data)
    except ChannelError:
        raise
    except (AttributeError, KeyError, TypeError, ValueError) as err:
        raise ChannelError(f"malformed {op!r} message: {err}") from err


def _decode(kind: type[Message], data: dict[str, Any]) -> Message:
    special = _SPECIAL.get(kind)
    if special is not None:
        return special(data)
    return _dataclass(kind, data)  # type: ignore[no-any-return]


def _setup(data: dict[str, Any]) -> Setup:
    plan = data.get("plan")
    if not isinstance(plan, dict):
        raise ChannelError("malformed 'setup' message: plan must be an object")
    setup: Setup = _dataclass(Setup, data, parsers={"plan": Plan.from_dict})
    return setup


def _endpoint_setup(data: dict[str, Any]) -> EndpointSetup:
    section = data.get("section")
    if set(data) != {"section"} or not isinstance(section, dict):
        raise ChannelError("malformed 'endpoint' message: it carries one section object")
    return EndpointSetup(_dataclass(EndpointSection, section))


def _object_parser(parse: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``parse`` for a field that must hold a JSON object (a nested record's own format)."""

    def read(value: Any) -> Any:
        if not isinstance(value, dict):
            raise ChannelError(f"expected an object, not {value!r}")
        return parse(value)

    return read


_SPECIAL: dict[type[Any], Callable[[dict[str, Any]], Message]] = {
    Setup: _setup,
    EndpointSetup: _endpoint_setup,
    EventReport: lambda data: _dataclass(
        EventReport, data, parsers={"event": _object_parser(parse_event)}
    ),
    StatusReply: lambda data: _dataclass(
        StatusReply, data, parsers={"snapshot": _object_parser(RunSnapshot.from_json)}
    ),
}
_BY_OP: dict[str, type[Any]] = {kind.op: kind for kind in MESSAGES}


def _dataclass(
    kind: type[Any],
    data: Mapping[str, Any],
    parsers: Mapping[str, Callable[[Any], Any]] | None = None,
) -> Any:
    """A frozen dataclass from ``data``: every field checked against its annotation.

    ``parsers`` read fields that have a format of their own (the plan, an event). Missing
    fields take their defaults (a peer of an older version); unknown ones are an error,
    so a typo or a newer peer's field never passes silently.
    """
    hints = typing.get_type_hints(kind)
    fields = {f.name: f for f in dataclasses.fields(kind)}
    unknown = set(data) - set(fields)
    if unknown:
        raise ChannelError(f"unknown fields {sorted(unknown)}")
    values = {}
    for name, spec in fields.items():
        if name in data:
            parse = (parsers or {}).get(name)
            values[name] = parse(data[name]) if parse else _typed(name, hints[name], data[name])
        elif spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING:
            raise ChannelError(f"missing field {name!r}")
    return kind(**values)


def _typed(name: str, hint: Any, value: Any) -> Any:
    """``value`` as ``hint`` (str, int, float, bool, enums, ``X | None``, tuples, mappings)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _typed(name, inner[0], value)
    if origin is tuple:
        if not isinstance(value, list):
            raise ChannelError(f"{name!r} must be a list")
        return tuple(_typed(name, args[0], item) for item in value)
    if origin in (Mapping, dict) or hint is Mapping:
        if not isinstance(value, dict):
            raise ChannelError(f"{name!r} must be an object")
        return {str(k): _typed(name, args[1], v) for k, v in value.items()}
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        if not isinstance(value, dict):
            raise ChannelError(f"{name!r} must be an object")
        return _dataclass(hint, value)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint(value)
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint in (str, int, float, bool) and type(value) is hint:
        return value
    raise ChannelError(f"{name!r} must be {getattr(hint, '__name__', hint)}, not {value!r}")
