"""JSON objects → frozen dataclasses, every field checked against its annotation.

The control channel's messages (``_messages``) are read with :func:`from_json`; it
knows nothing of the protocol. Anything that does not fit raises ``ValueError`` saying
which field and why, quoting at most a short ``reprlib`` form of what was sent (a peer
may send a megabyte where a name belongs).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import reprlib
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ddsup._json import Json


def from_json(
    kind: type[Any],
    data: Mapping[str, Json],
    parsers: Mapping[str, Callable[[Any], Any]] | None = None,
) -> Any:
    """A frozen dataclass from ``data``: every field checked against its annotation.

    ``parsers`` read fields that have a format of their own (the plan, an event). Missing
    fields take their defaults (a peer of an older version); unknown ones are an error,
    so a typo or a newer peer's field never passes silently.
    """
    hints, fields = _shape(kind)  # type: ignore[arg-type]  # classes are hashable
    unknown = set(data) - set(fields)
    if unknown:
        raise ValueError(f"unknown fields {reprlib.repr(sorted(unknown))}")
    values = {}
    for name, spec in fields.items():
        if name in data:
            parse = (parsers or {}).get(name)
            values[name] = parse(data[name]) if parse else typed(name, hints[name], data[name])
        elif spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING:
            raise ValueError(f"missing field {name!r}")
    return kind(**values)


def prepare(kinds: Iterable[type[Any]]) -> None:
    """Work out each class's shape now, and that of every dataclass its fields hold.

    :func:`from_json` works a class's shape out on its first use in a process. The
    agents' forker (``agent._agent_forker``) calls this for what an agent decodes before it
    forks, and its agents inherit the shapes instead of each evaluating annotation
    strings for its first Setup."""
    for kind in kinds:
        if dataclasses.is_dataclass(kind):
            hints, _fields = _shape(kind)
            prepare(_held_dataclasses(hints.values()))


def _held_dataclasses(hints: Iterable[Any]) -> Iterable[type[Any]]:
    """The dataclasses named in ``hints``, also inside ``X | None``, tuples, mappings."""
    for hint in hints:
        if dataclasses.is_dataclass(hint) and isinstance(hint, type):
            yield hint
        yield from _held_dataclasses(typing.get_args(hint))


@functools.cache
def _shape(kind: type[Any]) -> tuple[dict[str, Any], dict[str, dataclasses.Field[Any]]]:
    """A class's field types and fields, once: ``get_type_hints`` evaluates annotation
    strings on every call, and a lane feed decodes every lane record with them."""
    return typing.get_type_hints(kind), {f.name: f for f in dataclasses.fields(kind)}


def typed(name: str, hint: Any, value: Any) -> Any:
    """``value`` as ``hint`` (str, int, float, bool, enums, ``X | None``, tuples, mappings)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return typed(name, inner[0], value)
    if origin is tuple:
        if not isinstance(value, list):
            raise ValueError(f"{name!r} must be a list")
        return tuple(typed(name, args[0], item) for item in value)
    if origin in (Mapping, dict) or hint is Mapping:
        if not isinstance(value, dict):
            raise ValueError(f"{name!r} must be an object")
        return {str(k): typed(name, args[1], v) for k, v in value.items()}
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        if not isinstance(value, dict):
            raise ValueError(f"{name!r} must be an object")
        return from_json(hint, value)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint(value)
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint in (str, int, float, bool) and type(value) is hint:
        return value
    kind = getattr(hint, "__name__", hint)
    raise ValueError(f"{name!r} must be {kind}, not {reprlib.repr(value)}")
