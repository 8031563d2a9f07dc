"""A file of TOML read for checking: bytes → text → a document, and where its keys are.

Unit files and ``job.toml`` (``_job``) are read here, then each is checked against its
own table (``_parse``, ``_job``). Nothing a file contains may raise anything but a
problem: undecodable bytes, syntax errors, absurd sizes, deep nesting.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ddsup._errors import Problem
from ddsup.units._locate import KeyPath, Locator
from ddsup.units._model import Unit, UnitType
from ddsup.units._printable import printable

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

MAX_FILE_BYTES = 1024 * 1024  # a unit file is a few hundred bytes; refuse to parse megabytes
# The deepest real key is ``service.environment.NAME`` (3 parts). tomllib is quadratic in
# the parts of one key, so a key with more than this many never reaches it.
MAX_KEY_PARTS = 64
_TOML_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)$")
_TOML_AT_END = re.compile(r"\s*\(at end of document\)$")


@dataclass
class ParsedFile:
    """A unit file after its own checks: the unit when valid, and where things are in it."""

    path: str
    name: str
    text: str = ""
    unit: Unit | None = None
    unit_type: UnitType | None = None
    doc: Mapping[str, Any] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    locator: Locator | None = None

    def problem(self, path: KeyPath, message: str, *, at_value: bool = False) -> None:
        """Record ``message`` at the key (or value) ``path`` of this file."""
        if self.locator is None:
            self.locator = Locator(self.text)
        where = self.locator.value(path) if at_value else self.locator.key(path)
        self.problems.append(new_problem(self.path, *where, message))


def new_problem(path: str, line: int, col: int, message: str) -> Problem:
    """A problem as it will be printed: control characters of the path and the message
    (which quotes the file's own keys and values) escaped, see :mod:`._printable`."""
    return Problem(printable(path), line, col, printable(message))


def read_toml(path: str, data: bytes) -> ParsedFile:
    """``data`` decoded and parsed as TOML (``doc``), not yet checked against any table;
    what kept it from being read is its problem (never an exception). Unit files and
    ``job.toml`` (``_job``) are both read here."""
    if len(data) > MAX_FILE_BYTES:
        return too_large(path, len(data))
    parsed = ParsedFile(path, _unit_name(path))
    try:
        parsed.text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        col = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        byte = data[err.start : err.start + 1].hex()
        parsed.problems.append(new_problem(path, line, col, f"not UTF-8 text (byte 0x{byte})"))
        return parsed
    parsed.locator = Locator(parsed.text, max_key_parts=MAX_KEY_PARTS)
    if parsed.locator.overlong_key is not None:
        message = (
            f"a key with more than {MAX_KEY_PARTS} dotted parts; keys of unit files have "
            "at most 3 (section.key.name)"
        )
        parsed.problems.append(new_problem(path, *parsed.locator.overlong_key, message))
        return parsed
    try:
        parsed.doc = tomllib.loads(parsed.text)
    except tomllib.TOMLDecodeError as err:
        parsed.problems.append(_syntax_problem(path, parsed.text, err))
        return parsed
    except RecursionError:
        parsed.problems.append(new_problem(path, 1, 1, "TOML nesting is too deep"))
    return parsed


def too_large(path: str, size: int) -> ParsedFile:
    """The problem of a file over :data:`MAX_FILE_BYTES` (read no further than that)."""
    parsed = ParsedFile(path, _unit_name(path))
    message = f"file is {size / 1024 / 1024:.1f} MiB; a unit file may be at most 1 MiB"
    parsed.problems.append(new_problem(path, 1, 1, message))
    return parsed


def _unit_name(path: str) -> str:
    base = re.split(r"[\\/]", path)[-1]
    return base[: -len(".toml")] if base.endswith(".toml") else base


def _syntax_problem(path: str, text: str, err: tomllib.TOMLDecodeError) -> Problem:
    message = str(getattr(err, "msg", None) or err)
    line = getattr(err, "lineno", None)
    col = getattr(err, "colno", None)
    match = _TOML_POSITION.search(message)
    if match:
        line, col = int(match.group(1)), int(match.group(2))
    elif _TOML_AT_END.search(message):
        line = text.count("\n") + 1
        col = len(text) - (text.rfind("\n") + 1) + 1
    message = _TOML_AT_END.sub("", _TOML_POSITION.sub("", message))
    return new_problem(path, line or 1, col or 1, f"invalid TOML: {message}")
