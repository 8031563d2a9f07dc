"""Value kinds of unit-file keys: how each one is checked and converted, and its JSON Schema.

A :class:`Kind` pairs a converter (raw TOML value → model value, or :class:`Invalid`
with a message that says how to fix it) with the JSON Schema fragment of the same rule,
so that ``ddsup verify`` and ``ddsup schema`` cannot drift apart. The general kinds come
first, then those of the keys that shape a unit's process and its probe (environment
variables, probe targets).
"""

from __future__ import annotations

import datetime
import difflib
import enum
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from ddsup._json import Json, JsonObject
from ddsup.units._durations import (
    DURATION_HELP,
    format_duration,
    parse_duration,
    parse_signal,
    signal_names,
)
from ddsup.units._model import MinReady
from ddsup.units._sizes import SIZE_HELP, SIZE_PATTERN, format_size, parse_size

SubPath = tuple[str | int, ...]

VAR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
UNIT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*@?")
DURATION_PATTERN = r"^(\s*\d+(\.\d+)?\s*(ms|s|m|h))+\s*$"
_INTEGER = re.compile(r"\s*[+-]?\d+\s*")
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


def each(items: Sequence[object] | Mapping[str, object], check: Callable[[object], object]) -> None:
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
    json: Callable[[], JsonObject]


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


def expect(value: object, kind: type, what: str) -> None:
    if (isinstance(value, bool) and kind is not bool) or not isinstance(value, kind):
        raise Invalid(f"expected {what}, got {type_name(value)}")


def string(value: object) -> str:
    expect(value, str, "a string")
    assert isinstance(value, str)
    no_nul(value)
    return value


def no_nul(text: str) -> None:
    """Every string of a unit file ends up in an argument, a variable or a path of the
    operating system, where a NUL ends it: refuse it here, not at exec."""
    if "\0" in text:
        raise Invalid(
            "contains a NUL character (\\u0000), which no argument, environment variable "
            "or path can hold"
        )


def nonempty_string(value: object) -> str:
    if not string(value):
        raise Invalid("must not be empty")
    return str(value)


def _list(value: object, what: str) -> list[object]:
    if isinstance(value, str):
        item = value.strip() if what == "integers" and _INTEGER.fullmatch(value) else f'"{value}"'
        raise Invalid(f"expected an array of {what}, got a string; write [{item}]")
    if isinstance(value, int) and not isinstance(value, bool):
        raise Invalid(f"expected an array of {what}, got an integer; write [{value}]")
    expect(value, list, f"an array of {what}")
    assert isinstance(value, list)
    return value


def _strings(value: object) -> tuple[str, ...]:
    items = _list(value, "strings")
    each(items, string)
    return tuple(str(item) for item in items)


def matching(pattern: re.Pattern[str], what: str) -> Callable[[object], tuple[str, ...]]:
    def convert(value: object) -> tuple[str, ...]:
        items = _strings(value)

        def check(item: object) -> None:
            if not pattern.fullmatch(str(item)):
                raise Invalid(f"{item!r} is not a valid {what}")

        each(items, check)
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
        if not isinstance(value, int) or isinstance(value, bool):
            raise Invalid(f"expected an integer, got {type_name(value)}{_integer_hint(value)}")
        _check_range(value, low, high)
        return value

    def json() -> JsonObject:
        schema: JsonObject = {"type": "integer"}
        if low is not None:
            schema["minimum"] = low
        if high is not None:
            schema["maximum"] = high
        return schema

    return Kind("integer", convert, json)


def _integer_hint(value: object) -> str:
    """How to write ``value`` as the integer it probably means, if it has one."""
    if isinstance(value, str) and _INTEGER.fullmatch(value):
        return f"; write {int(value)} without quotes"
    if isinstance(value, float) and value.is_integer():
        return f"; write {int(value)}"
    return f" {value!r}" if isinstance(value, (str, float)) else ""


def _check_range(value: int, low: int | None, high: int | None) -> None:
    if low is not None and high is not None and not low <= value <= high:
        raise Invalid(f"must be from {low} to {high}, got {value}")
    if low is not None and value < low:
        raise Invalid(f"must be at least {low}, got {value}")
    if high is not None and value > high:
        raise Invalid(f"must be at most {high}, got {value}")


def choice(enum_type: type[enum.Enum]) -> Kind:
    """One of the values of a string enum of the model."""
    values = [str(member.value) for member in enum_type]

    def convert(value: object) -> enum.Enum:
        text = string(value)
        if text in values:
            return enum_type(text)
        close = difflib.get_close_matches(text, values, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        expected = ", ".join(repr(v) for v in values)
        raise Invalid(f"invalid value {text!r}, expected one of {expected}{hint}")

    return Kind(" | ".join(f'"{v}"' for v in values), convert, lambda: {"enum": list[Json](values)})


def duration(*, positive: bool, typical: float) -> Kind:
    """A duration (``> 0`` when ``positive``); ``typical`` seconds steer the hint for a
    bare number towards the unit a user of this key most likely meant."""

    def convert(value: object) -> float:
        try:
            seconds = parse_duration(value, typical=typical)
        except ValueError as err:
            raise Invalid(str(err)) from None
        if positive and seconds <= 0:
            raise Invalid(f'must be longer than 0, e.g. "{format_duration(typical)}"')
        return seconds

    name = "duration (> 0)" if positive else "duration"
    return Kind(name, convert, _duration_json)


def _duration_json() -> JsonObject:
    return {"type": "string", "pattern": DURATION_PATTERN, "description": DURATION_HELP}


def size(low: int) -> Kind:
    """A byte size of at least ``low`` (``"64M"``, or an integer of bytes)."""

    def convert(value: object) -> int:
        try:
            parsed = parse_size(value)
        except ValueError as err:
            raise Invalid(str(err)) from None
        if parsed < low:
            raise Invalid(f"must be at least {format_size(low)}, got {value!r}")
        return parsed

    def json() -> JsonObject:
        text: JsonObject = {"type": "string", "pattern": SIZE_PATTERN, "description": SIZE_HELP}
        return {"oneOf": [{"type": "integer", "minimum": low}, text]}

    return Kind(f"size (at least {format_size(low)})", convert, json)


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

    each(items, check)
    return tuple(check(item) for item in items)


def _exit_statuses(value: object) -> frozenset[int]:
    items = _list(value, "integers")
    if not items:
        raise Invalid("must list at least one exit status, e.g. [0]")
    each(items, integer(0, 255).convert)
    return frozenset(int(item) for item in items)  # type: ignore[call-overload]


def _or_auto(base: Kind) -> Callable[[object], object]:
    def convert(value: object) -> object:
        if value == "auto":
            return None
        if isinstance(value, str):
            hint = f"; write {int(value)} without quotes" if _INTEGER.fullmatch(value) else ""
            raise Invalid(f'expected an integer or "auto", got {value!r}{hint}')
        return base.convert(value)

    return convert


def _min_ready(value: object) -> MinReady:
    if isinstance(value, str):
        match = _PERCENT.fullmatch(value)
        if not match and _INTEGER.fullmatch(value):
            number = int(value)
            raise Invalid(f'invalid min_ready {value!r}; write {number} (a count) or "{number}%"')
        if not match:
            raise Invalid(f'invalid min_ready {value!r}; write a count (2) or a percentage ("50%")')
        percent = float(match.group(1))
        if not 0 < percent <= 100:
            raise Invalid(f"percentage must be above 0% and at most 100%, got {value!r}")
        return MinReady(count=None, percent=percent)
    if isinstance(value, float) and not value.is_integer() and 0 < value < 1:
        raise Invalid(f'expected a count or a percentage, got {value}; write "{value * 100:g}%"')
    count = integer(1).convert(value)
    assert isinstance(count, int)
    return MinReady(count=count, percent=None)


def _auto_json(base: JsonObject) -> Callable[[], JsonObject]:
    return lambda: {"oneOf": [base, {"const": "auto"}]}


TEXT: JsonObject = {"type": "string", "pattern": "^[^\\x00]*$"}  # no NUL (``no_nul``)
STRING = Kind("string", string, lambda: dict(TEXT))
NONEMPTY_STRING = Kind("string", nonempty_string, lambda: {**TEXT, "minLength": 1})
STRINGS = Kind("array of strings", _strings, lambda: {"type": "array", "items": dict(TEXT)})
UNIT_NAMES = Kind(
    "array of unit names",
    matching(UNIT_NAME, "unit name"),
    lambda: {"type": "array", "items": {"type": "string", "pattern": f"^{UNIT_NAME.pattern}$"}},
)
ARGV = Kind(
    "argv (array of strings)",
    _argv,
    lambda: {"type": "array", "items": dict(TEXT), "minItems": 1},
)
SIGNAL = Kind("signal name", _signal, lambda: {"enum": list(signal_names())})
FORWARD_SIGNALS = Kind(
    "array of signal names",
    _signals,
    lambda: {"type": "array", "items": {"enum": list(signal_names())}},
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


# Kinds of the keys that shape a unit's process and its probe: variables, probe targets.


def _environment(value: object) -> MappingProxyType[str, str]:
    expect(value, dict, 'a table of strings, e.g. { NAME = "value" }')
    assert isinstance(value, dict)
    each({name: (name, item) for name, item in value.items()}, _variable)
    return MappingProxyType(dict(value))


def _variable_name(value: object) -> str:
    name = string(value)
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
    try:
        no_nul(item)
    except Invalid as err:
        raise Invalid(f"value of {name} {err.message}") from None


def _http_url(value: object) -> str:
    text = nonempty_string(value)
    if not text.startswith(("http://", "https://", "{")):
        raise Invalid(
            f'expected an http:// or https:// URL, got {text!r}; e.g. "http://{{host}}:{{port}}/health"'
        )
    return text


def _tcp_target(value: object) -> str:
    text = nonempty_string(value)
    host, colon, port = text.rpartition(":")
    if not (host and colon and port):
        raise Invalid(f'expected "host:port", got {text!r}; e.g. "{{host}}:{{port}}"')
    return text


VAR_NAMES = Kind(
    "array of variable names",
    matching(VAR_NAME, "environment variable name"),
    lambda: {"type": "array", "items": {"type": "string", "pattern": f"^{VAR_NAME.pattern}$"}},
)
VARIABLE = Kind(
    "variable name",
    lambda value: _variable_name(value),
    lambda: {"type": "string", "pattern": f"^{VAR_NAME.pattern}$"},
)
ENVIRONMENT = Kind(
    "table of strings",
    _environment,
    lambda: {
        "type": "object",
        "propertyNames": {"pattern": f"^{VAR_NAME.pattern}$"},
        "additionalProperties": dict(TEXT),
    },
)
HTTP_URL = Kind("URL", _http_url, lambda: {"type": "string", "minLength": 1})
TCP_TARGET = Kind('"host:port"', _tcp_target, lambda: {"type": "string", "pattern": ".:."})
