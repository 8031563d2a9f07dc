"""The rules every control-channel message is written and read by, whatever its kind.

One JSON object a line with an ``op``; flat fields as they are, tuples as lists; every
field checked against its annotation on the way in (``_typed``). Here, apart from the
codecs of the message kinds, so that each side imports only the kinds it speaks: an
operator's client (``_operator_codec``), a node agent (``_agent_codec``), and the
controller, which speaks them all (``_codec``). One implementation: the same bytes
whichever codec writes them.
"""

from __future__ import annotations

import dataclasses
import json
import reprlib
from collections.abc import Callable, Mapping
from typing import Any

from ddsup._json import Json
from ddsup.channel._hello import ChannelError, Hello
from ddsup.channel._typed import from_json

Decoder = Callable[[dict[str, Json]], Any]
"""Reads a message of a kind with fields of a format of their own from its line's object."""


# --- encode -------------------------------------------------------------------------------
line_json = json.JSONEncoder(separators=(",", ":")).encode
"""An object as one compact JSON text, ``json.dumps``'s bytes without its cost per call:
``dumps`` with any option builds a new encoder for every message it writes."""


def encode_fields(message: Any) -> dict[str, Json]:
    """The fields of a flat message (a hello, a command, an operator's request), as JSON
    values; a message with a nested record's own format is its codec's to write."""
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
