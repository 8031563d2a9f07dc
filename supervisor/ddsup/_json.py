"""A JSON value whose shape is open: what ``json.loads`` may return, or ``json.dumps`` write.

For documents that are JSON by nature and have no fixed keys (a JSON Schema, a body
relayed untouched, a user's own table). A record with known keys gets a ``TypedDict`` or
a dataclass instead, so that a misspelt key is a type error rather than a missing value.
"""

from __future__ import annotations

from typing import TypeAlias

Json: TypeAlias = "bool | int | float | str | list[Json] | dict[str, Json] | None"
JsonObject: TypeAlias = "dict[str, Json]"
