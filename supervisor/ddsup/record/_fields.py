"""Typed access to the fields of one JSON object read back from a run's files.

Readers of ``events.jsonl`` lines (and other records) ask for a field as the type they
need; anything else is a ValueError that names the field, which the reader of a whole
file turns into "skip this line".
"""

from __future__ import annotations

from collections.abc import Mapping

from ddsup._json import Json


class FieldReader:
    """Typed access to one event object's fields (ValueError naming the field)."""

    def __init__(self, data: Mapping[str, Json]) -> None:
        self.data: Mapping[str, Json] = data

    def time(self) -> float:
        value = self.data.get("time")
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise ValueError("an event needs a numeric time")
        return float(value)

    def text(self, key: str) -> str:
        value = self.data.get(key)
        if not isinstance(value, str):
            raise ValueError(f"{key!r} must be a string")
        return value

    def optional_text(self, key: str) -> str | None:
        return None if self.data.get(key) is None else self.text(key)

    def integer(self, key: str) -> int:
        value = self.data.get(key)
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"{key!r} must be an integer")
        return value

    def integers(self, key: str) -> tuple[int, ...]:
        """A list of integers (none when the key is missing or null)."""
        value = self.data.get(key) or []
        if not isinstance(value, list) or not all(_is_int(v) for v in value):
            raise ValueError(f"{key!r} must be a list of integers")
        return tuple(v for v in value if isinstance(v, int))

    def optional_integer(self, key: str) -> int | None:
        return None if self.data.get(key) is None else self.integer(key)

    def number(self, key: str) -> float:
        value = self.optional_number(key)
        if value is None:
            raise ValueError(f"{key!r} must be a number")
        return value

    def texts(self, key: str) -> tuple[str, ...]:
        """A list of strings (none when the key is missing or null)."""
        value = self.data.get(key) or []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"{key!r} must be a list of strings")
        return tuple(v for v in value if isinstance(v, str))

    def optional_number(self, key: str) -> float | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise ValueError(f"{key!r} must be a number")
        return float(value)


def _is_int(value: Json) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
