"""The codec's core, and all an operator's one-request client needs of it.

``ddsup status`` sends a hello and one request and reads one reply. The whole protocol's
codec (``_codec``) knows every message of the run and imports what they carry (the plan,
the unit sections, every event): ~20 ms of the command's CPU, more than its exchange at
256 lanes. So the rules every message is written and read by live here, with the
operator's messages; ``_codec`` adds the run's own messages on top of them (one
implementation: the same bytes either way).
"""

from __future__ import annotations

import dataclasses
import json
import reprlib
from collections.abc import Callable, Mapping
from typing import Any

from ddsup.channel._hello import ChannelError, Hello
from ddsup.channel._operator_messages import OPERATOR_MESSAGES, OperatorMessage, StatusReply
from ddsup.channel._typed import from_json
from ddsup.record._status import RunSnapshot

Decoder = Callable[[dict[str, Any]], Any]


# --- encode -------------------------------------------------------------------------------
def encode_fields(message: Any) -> dict[str, Any]:
    """The fields of a hello or an operator message (any flat message), as JSON values."""
    if isinstance(message, StatusReply):
        return {"snapshot": message.snapshot.to_json()}
    if isinstance(message, Hello):
        return {k: v for k, v in dataclasses.asdict(message).items() if v is not None}
    return {k: _plain(v) for k, v in dataclasses.asdict(message).items()}


def encode_operator(message: Hello | OperatorMessage) -> bytes:
    """One message as a JSON line's bytes (without the newline)."""
    if isinstance(message, StatusReply):  # its rows' text joined: RunSnapshot.json_text
        return f'{{"op":"{message.op}","snapshot":{message.snapshot.json_text()}}}'.encode()
    return json.dumps({"op": message.op, **encode_fields(message)}, separators=(",", ":")).encode()


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


def decode_with(
    by_op: Mapping[str, type[Any]], special: Mapping[type[Any], Decoder], line: bytes
) -> Any:
    """The message on one line, of the kinds ``by_op`` knows (``special``: the kinds with
    fields of a format of their own); ChannelError for anything malformed or unknown.

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
    kind = by_op.get(op) if isinstance(op, str) else None
    if kind is None:
        raise ChannelError(f"unknown message {reprlib.repr(op)}")
    try:
        decode = special.get(kind)
        return decode(data) if decode is not None else from_json(kind, data)
    except _PARSE_ERRORS as err:
        raise ChannelError(f"malformed {op!r} message: {_short(err)}") from err


def _short(err: BaseException) -> str:
    """An error's text, cut short: it may quote what a hostile peer sent."""
    text = str(err)
    return text if len(text) <= 200 else text[:200] + "…"


def object_parser(parse: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``parse`` for a field that must hold a JSON object (a nested record's own format)."""

    def read(value: Any) -> Any:
        if not isinstance(value, dict):
            raise ValueError(f"expected an object, not {reprlib.repr(value)}")
        return parse(value)

    return read


OPERATOR_SPECIAL: dict[type[Any], Decoder] = {
    StatusReply: lambda data: from_json(
        StatusReply, data, parsers={"snapshot": object_parser(RunSnapshot.from_json)}
    ),
}
_OPERATOR_BY_OP: dict[str, type[Any]] = {kind.op: kind for kind in OPERATOR_MESSAGES}


def decode_operator(line: bytes) -> OperatorMessage:
    """The controller's answer to an operator; ChannelError for anything else."""
    message: OperatorMessage = decode_with(_OPERATOR_BY_OP, OPERATOR_SPECIAL, line)
    return message
