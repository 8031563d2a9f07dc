"""Where in a TOML text a key or value is: ``(table path, key)`` → line and column.

:mod:`tomllib` reports positions only for syntax errors, yet every validation problem
must point at the offending key. This module scans the raw text again (only once the
parser has accepted it, and only when a problem needs a position) and records where
each key and value starts: ``[table]`` and ``[[array]]`` headers, ``key = value`` lines,
dotted and quoted keys, arrays (elements are addressed by index) and inline tables.

It is best effort by design: anything it cannot follow leaves that part unrecorded, and
lookups fall back to the nearest enclosing key, then to line 1, column 1.
"""

from __future__ import annotations

import bisect
import contextlib
import re
import sys
from collections.abc import Callable

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

KeyPath = tuple[str | int, ...]

_BLANK = re.compile(r"(?:[ \t\r\n]+|#[^\n]*)*")
_WS = re.compile(r"[ \t]*")
_LINE_REST = re.compile(r"[ \t]*(?:#[^\n]*)?")
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_BASIC = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_LITERAL = re.compile(r"'[^'\n]*'")
_ML_BASIC = re.compile(r'"""(?:\\.|[^\\])*?"{3,5}', re.S)
_ML_LITERAL = re.compile(r"'''.*?'{3,5}", re.S)
_SCALAR = re.compile(
    r"\d{4}-\d\d-\d\d[Tt ]\d\d:\d\d(?::\d\d(?:\.\d+)?)?(?:[Zz]|[+-]\d\d:\d\d)?"
    r"|[^ \t\r\n,\]}#]+"
)


class Locator:
    """Positions of the keys and values of one TOML text (1-based line and column)."""

    def __init__(self, text: str) -> None:
        self._starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self._keys: dict[KeyPath, int] = {}
        self._values: dict[KeyPath, int] = {}
        # Best effort: when the scanner loses its way, what it recorded so far still helps.
        with contextlib.suppress(ValueError, IndexError, RecursionError):
            _Scanner(text, self._keys.setdefault, self._values.setdefault).document()

    def key(self, path: KeyPath) -> tuple[int, int]:
        """Where the key at ``path`` is written, else its nearest recorded ancestor."""
        for depth in range(len(path), 0, -1):
            offset = self._keys.get(path[:depth])
            if offset is None:
                offset = self._values.get(path[:depth])
            if offset is not None:
                return self._position(offset)
        return 1, 1

    def value(self, path: KeyPath) -> tuple[int, int]:
        """Where the value at ``path`` starts, else where its key is (see :meth:`key`)."""
        offset = self._values.get(path)
        return self.key(path) if offset is None else self._position(offset)

    def _position(self, offset: int) -> tuple[int, int]:
        line = bisect.bisect_right(self._starts, offset)
        return line, offset - self._starts[line - 1] + 1


class _Scanner:
    """A forgiving recursive-descent walk over TOML that records offsets, nothing else."""

    def __init__(
        self,
        text: str,
        record_key: Callable[[KeyPath, int], int],
        record_value: Callable[[KeyPath, int], int],
    ) -> None:
        self.text = text
        self.i = 0
        self.record_key = record_key
        self.record_value = record_value
        self.array_tables: dict[KeyPath, int] = {}

    def document(self) -> None:
        table: KeyPath = ()
        while True:
            self.skip(_BLANK)
            if self.i >= len(self.text):
                return
            if self.text[self.i] == "[":
                table = self.header()
            else:
                self.keyval(table)
            self.skip(_LINE_REST)

    def header(self) -> KeyPath:
        start = self.i
        is_array = self.text.startswith("[[", self.i)
        self.i += 2 if is_array else 1
        path = self.key_parts(())
        self.skip(_WS)
        closing = "]]" if is_array else "]"
        if not self.text.startswith(closing, self.i):
            raise ValueError("unterminated table header")
        self.i += len(closing)
        if not is_array:
            return path
        index = self.array_tables.get(path, 0)
        self.array_tables[path] = index + 1
        self.record_key((*path, index), start)
        return (*path, index)

    def keyval(self, table: KeyPath) -> None:
        path = self.key_parts(table)
        self.skip(_WS)
        if not self.text.startswith("=", self.i):
            raise ValueError("expected '='")
        self.i += 1
        self.skip(_WS)
        self.value(path)

    def key_parts(self, prefix: KeyPath) -> KeyPath:
        path = prefix
        while True:
            self.skip(_WS)
            start = self.i
            path = (*path, self.simple_key())
            self.record_key(path, start)
            self.skip(_WS)
            if not self.text.startswith(".", self.i):
                return path
            self.i += 1

    def simple_key(self) -> str:
        for pattern in (_BASIC, _LITERAL, _BARE_KEY):
            match = pattern.match(self.text, self.i)
            if match:
                self.i = match.end()
                raw = match.group()
                if raw.startswith('"'):
                    return str(tomllib.loads(f"k = {raw}")["k"])
                return raw[1:-1] if raw.startswith("'") else raw
        raise ValueError("expected a key")

    def value(self, path: KeyPath) -> None:
        self.record_value(path, self.i)
        char = self.text[self.i]
        if char == "[":
            self.array(path)
        elif char == "{":
            self.inline_table(path)
        else:
            for pattern in (_ML_BASIC, _ML_LITERAL, _BASIC, _LITERAL, _SCALAR):
                match = pattern.match(self.text, self.i)
                if match:
                    self.i = match.end()
                    return
            raise ValueError("expected a value")

    def array(self, path: KeyPath) -> None:
        self.i += 1
        index = 0
        while True:
            self.skip(_BLANK)
            if self.text[self.i] == "]":
                self.i += 1
                return
            self.value((*path, index))
            index += 1
            self.skip(_BLANK)
            if self.text[self.i] == ",":
                self.i += 1

    def inline_table(self, path: KeyPath) -> None:
        self.i += 1
        while True:
            self.skip(_BLANK)
            if self.text[self.i] == "}":
                self.i += 1
                return
            self.keyval(path)
            self.skip(_BLANK)
            if self.text[self.i] == ",":
                self.i += 1

    def skip(self, pattern: re.Pattern[str]) -> None:
        match = pattern.match(self.text, self.i)
        if match:
            self.i = match.end()
