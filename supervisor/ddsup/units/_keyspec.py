"""The shapes of the unit-file table: one key (:class:`KeySpec`), one section (:class:`SectionSpec`).

Split from :mod:`ddsup.units._schema` so that a section's keys can live in a module of
their own (:mod:`ddsup.units._schema_endpoint`) and the table stays small enough to read.
"""

from __future__ import annotations

from dataclasses import dataclass

from ddsup.units import _kinds as k
from ddsup.units._durations import parse_duration
from ddsup.units._model import UnitType

ALL_TYPES = frozenset(UnitType)


@dataclass(frozen=True)
class KeySpec:
    """One key: its kind, documentation, default (as written in TOML) and restrictions.

    ``required_for``: the unit types whose files must give this key (when they have its
    section at all; whether they must is :attr:`SectionSpec.required_for`).
    """

    name: str
    kind: k.Kind
    doc: str
    default: object = None
    example: object = None
    required_for: frozenset[UnitType] = frozenset()
    specifiers: bool = False
    only: frozenset[UnitType] = ALL_TYPES


@dataclass(frozen=True)
class SectionSpec:
    """One ``[section]``: its keys and which unit types may (or must) have it."""

    name: str
    doc: str
    keys: tuple[KeySpec, ...]
    only: frozenset[UnitType] = ALL_TYPES
    required_for: frozenset[UnitType] = frozenset()

    def key(self, name: str) -> KeySpec | None:
        return next((key for key in self.keys if key.name == name), None)


def duration_key(
    name: str, doc: str, default: str, example: str, *, positive: bool = False
) -> KeySpec:
    """A duration key; its default (or example, when the default is 0) is the typical
    value that steers the hint for a bare number (``interval = 250`` → ``"250ms"``)."""
    typical = parse_duration(default) or parse_duration(example)
    kind = k.duration(positive=positive, typical=typical)
    return KeySpec(name, kind, doc, default, example)
