"""Value kinds of unit-file keys: how each one is checked and converted, and its JSON Schema.

A :class:`Kind` pairs a converter (raw TOML value → model value, or :class:`Invalid`
with a message that says how to fix it) with the JSON Schema fragment of the same rule,
so that ``ddsup verify`` and ``ddsup schema`` cannot drift apart.
"""

from __future__ import annotations

import datetime
import difflib
import enum
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from ddsup.units._durations import (
    DURATION_HELP,
    parse_duration,
    parse_signal,
    signal_names,
)
from ddsup.units._model import MinReady

Json = dict[str, Any]
SubPath = tuple[str | int, ...]

VAR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
UNIT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*@?")
DURATION_PATTERN = r"^(\s*\d+(\.\d+)?\s*(ms|s|m|h))+\s*$"
_PERCENT = re.compile(r"\s*(\d+(?:\.\d+)?)\s*%\s*")


class Invalid(Exception):
    """A value is wrong; ``at`` locates the culprit inside it (an index, a table key)."""

    def __init__(
        self,
        message: str,
        at: SubPath = (),
        others: tuple[Invalid, ...] = (),
        *,
        on_key: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.at = at
        self.others = others
        self.on_key = on_key  # the culprit is a table key (a name), not its value

    def all(self) -> tuple[Invalid, ...]:
        """This problem and the others found in the same value."""
        return (self, *self.others)


def _each(
    items: Sequence[object] | Mapping[str, object], check: Callable[[object], object]
) -> None:
    """Run ``check`` on every element (or table value) and raise all failures at once."""
    pairs = items.items() if isinstance(items, Mapping) else enumerate(items)
    found: list[Invalid] = []
    for where, item in pairs:
        try:
            check(item)
        except Invalid as err:
            found.append(Invalid(err.message, (where, *err.at), on_key=err.on_key))
    if found:
        first = found[0]
        raise Invalid(first.message, first.at, tuple(found[1:]), on_key=first.on_key)


@dataclass(frozen=True)
class Kind:
    """A value type of unit files: ``name`` for docs, ``convert`` and ``json`` for the rules."""

    name: str
    convert: Callable[[object], object]
    json: Callable[[], Json]


def type_name(value: object) -> str:
    """TOML's name for the type of a parsed value, for messages."""
    if isinstance(value, bool):
        return "boolean"
    names: tuple[tuple[type | tuple[type, ...], str], ...] = (
        (str, "string"),
        (int, "integer"),
        (float, "float"),
        (list, "array"),
        (dict, "table"),
        ((datetime.date, datetime.time), "date/time"),
    )
    return next((name for kind, name in names if isinstance(value, kind)), "value")


def _expect(value: object, kind: type, what: str) -> None:
    if (isinstance(value, bool) and kind is not bool) or not isinstance(value, kind):
        raise Invalid(f"expected {what}, got {type_name(value)}")


def _string(value: object) -> str:
    _expect(value, str, "a string")
    assert isinstance(value, str)
    return value


def _nonempty_string(value: object) -> str:
    if not _string(value):
        raise Invalid("must not be empty")
    return str(value)


def _list(value: object, what: str) -> list[object]:
    if isinstance(value, str):
        raise Invalid(f'expected an array of {what}, got a string; write ["{value}"]')
    _expect(value, list, f"an array of {what}")
    assert isinstance(value, list)
    return value


def _strings(value: object) -> tuple[str, ...]:
    items = _list(value, "strings")
    _each(items, _string)
    return tuple(str(item) for item in items)


def _matching(pattern: re.Pattern[str], what: str) -> Callable[[object], tuple[str, ...]]:
    def convert(value: object) -> tuple[str, ...]:
        items = _strings(value)

        def check(item: object) -> None:
            if not pattern.fullmatch(str(item)):
                raise Invalid(f"{item!r} is not a valid {what}")

        _each(items, check)
        return items

    return convert


def _argv(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        raise Invalid(
            f"exec must be an argument vector, e.g. {_suggest_argv(value)} — ddsup never runs a shell"
        )
    argv = _strings(value)
    if not argv:
        raise Invalid("must not be empty: give the program and its arguments")
    if not argv[0]:
        raise Invalid("the program (first element) must not be empty", (0,))
    return argv


def _suggest_argv(text: str) -> str:
    words = text.split()[:4] or ["vllm", "serve"]
    return "[" + ", ".join(f'"{w}"' for w in words) + "]"


def integer(low: int | None = None, high: int | None = None) -> Kind:
    """An integer in ``[low, high]`` (either bound may be open)."""

    def convert(value: object) -> int:
        _expect(value, int, "an integer")
        assert isinstance(value, int)
        _check_range(value, low, high)
        return value

    def json() -> Json:
        schema: Json = {"type": "integer"}
        if low is not None:
            schema["minimum"] = low
        if high is not None:
            schema["maximum"] = high
        return schema

    return Kind("integer", convert, json)


def _check_range(value: int, low: int | None, high: int | None) -> None:
    if low is not None and high is not None and not low <= value <= high:
        raise Invalid(f"{value} is out of range {low}..{high}")
    if low is not None and value < low:
        raise Invalid(f"must be at least {low}, got {value}")
    if high is not None and value > high:
        raise Invalid(f"must be at most {high}, got {value}")


def choice(enum_type: type[enum.Enum]) -> Kind:
    """One of the values of a string enum of the model."""
    values = [str(member.value) for member in enum_type]

    def convert(value: object) -> enum.Enum:
        text = _string(value)
        if text in values:
            return enum_type(text)
        close = difflib.get_close_matches(text, values, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        expected = ", ".join(repr(v) for v in values)
        raise Invalid(f"invalid value {text!r}, expected one of {expected}{hint}")

    return Kind(" | ".join(f'"{v}"' for v in values), convert, lambda: {"enum": values})


def _duration(positive: bool) -> Callable[[object], float]:
    def convert(value: object) -> float:
        try:
            seconds = parse_duration(value)
        except ValueError as err:
            raise Invalid(str(err)) from None
        if positive and seconds <= 0:
            raise Invalid("must be longer than 0")
        return seconds

    return convert


def _duration_json() -> Json:
    return {"type": "string", "pattern": DURATION_PATTERN, "description": DURATION_HELP}


def _signal(value: object) -> object:
    try:
        return parse_signal(value)
    except ValueError as err:
        raise Invalid(str(err)) from None


def _signals(value: object) -> tuple[object, ...]:
    items = _list(value, "signal names")

    def check(item: object) -> object:
        try:
            return parse_signal(item, forwardable=True)
        except ValueError as err:
            raise Invalid(str(err)) from None

    _each(items, check)
    return tuple(check(item) for item in items)


def _environment(value: object) -> MappingProxyType[str, str]:
    _expect(value, dict, 'a table of strings, e.g. { NAME = "value" }')
    assert isinstance(value, dict)
    _each({name: (name, item) for name, item in value.items()}, _variable)
    return MappingProxyType(dict(value))


def _variable_name(value: object) -> str:
    name = _string(value)
    if not VAR_NAME.fullmatch(name):
        raise Invalid(f"{name!r} is not a valid environment variable name")
    return name


def _variable(pair: object) -> None:
    assert isinstance(pair, tuple)
    name: str = pair[0]
    item: object = pair[1]
    if not VAR_NAME.fullmatch(name):
        raise Invalid(f"{name!r} is not a valid environment variable name", on_key=True)
    if not isinstance(item, str):
        hint = f'; quote it: {name} = "{item}"' if isinstance(item, (int, float)) else ""
        raise Invalid(f"value of {name} must be a string, got {type_name(item)}{hint}")


def _exit_statuses(value: object) -> frozenset[int]:
    items = _list(value, "integers")
    if not items:
        raise Invalid("must list at least one exit status, e.g. [0]")
    _each(items, integer(0, 255).convert)
    return frozenset(int(item) for item in items)  # type: ignore[call-overload]


def _or_auto(base: Kind) -> Callable[[object], object]:
    def convert(value: object) -> object:
        if value == "auto":
            return None
        if isinstance(value, str):
            raise Invalid(f'expected an integer or "auto", got {value!r}')
        return base.convert(value)

    return convert


def _min_ready(value: object) -> MinReady:
    if isinstance(value, str):
        match = _PERCENT.fullmatch(value)
        if not match:
            raise Invalid(f'invalid min_ready {value!r}; write a count (2) or a percentage ("50%")')
        percent = float(match.group(1))
        if not 0 < percent <= 100:
            raise Invalid(f"percentage must be above 0% and at most 100%, got {value!r}")
        return MinReady(count=None, percent=percent)
    count = integer(1).convert(value)
    assert isinstance(count, int)
    return MinReady(count=count, percent=None)


def _http_url(value: object) -> str:
    text = _nonempty_string(value)
    if not text.startswith(("http://", "https://", "{")):
        raise Invalid(
            f'expected an http:// or https:// URL, got {text!r}; e.g. "http://{{host}}:{{port}}/health"'
        )
    return text


def _tcp_target(value: object) -> str:
    text = _nonempty_string(value)
    host, colon, port = text.rpartition(":")
    if not (host and colon and port):
        raise Invalid(f'expected "host:port", got {text!r}; e.g. "{{host}}:{{port}}"')
    return text


def _auto_json(base: Json) -> Callable[[], Json]:
    return lambda: {"oneOf": [base, {"const": "auto"}]}


STRING = Kind("string", _string, lambda: {"type": "string"})
NONEMPTY_STRING = Kind("string", _nonempty_string, lambda: {"type": "string", "minLength": 1})
STRINGS = Kind("array of strings", _strings, lambda: {"type": "array", "items": {"type": "string"}})
UNIT_NAMES = Kind(
    "array of unit names",
    _matching(UNIT_NAME, "unit name"),
    lambda: {"type": "array", "items": {"type": "string", "pattern": f"^{UNIT_NAME.pattern}$"}},
)
VAR_NAMES = Kind(
    "array of variable names",
    _matching(VAR_NAME, "environment variable name"),
    lambda: {"type": "array", "items": {"type": "string", "pattern": f"^{VAR_NAME.pattern}$"}},
)
VARIABLE = Kind(
    "variable name",
    lambda value: _variable_name(value),
    lambda: {"type": "string", "pattern": f"^{VAR_NAME.pattern}$"},
)
ARGV = Kind(
    "argv (array of strings)",
    _argv,
    lambda: {"type": "array", "items": {"type": "string"}, "minItems": 1},
)
DURATION = Kind("duration", _duration(positive=False), _duration_json)
POSITIVE_DURATION = Kind("duration (> 0)", _duration(positive=True), _duration_json)
SIGNAL = Kind("signal name", _signal, lambda: {"enum": list(signal_names())})
FORWARD_SIGNALS = Kind(
    "array of signal names",
    _signals,
    lambda: {"type": "array", "items": {"enum": list(signal_names())}},
)
ENVIRONMENT = Kind(
    "table of strings",
    _environment,
    lambda: {
        "type": "object",
        "propertyNames": {"pattern": f"^{VAR_NAME.pattern}$"},
        "additionalProperties": {"type": "string"},
    },
)
EXIT_STATUSES = Kind(
    "array of integers 0..255",
    _exit_statuses,
    lambda: {
        "type": "array",
        "minItems": 1,
        "items": {"type": "integer", "minimum": 0, "maximum": 255},
    },
)
PORT = integer(1, 65535)
PORT_OR_AUTO = Kind('integer 1..65535 or "auto"', _or_auto(PORT), _auto_json(PORT.json()))
REPLICAS = Kind(
    'integer >= 1 or "auto"', _or_auto(integer(1)), _auto_json({"type": "integer", "minimum": 1})
)
WORKERS = Kind(
    'integer >= 1 or "auto"', _or_auto(integer(1)), _auto_json({"type": "integer", "minimum": 1})
)
MIN_READY = Kind(
    'integer >= 1 or "N%"',
    _min_ready,
    lambda: {
        "oneOf": [
            {"type": "integer", "minimum": 1},
            {"type": "string", "pattern": r"^\s*\d+(\.\d+)?\s*%\s*$"},
        ]
    },
)
HTTP_URL = Kind("URL", _http_url, lambda: {"type": "string", "minLength": 1})
TCP_TARGET = Kind('"host:port"', _tcp_target, lambda: {"type": "string", "pattern": ".:."})
