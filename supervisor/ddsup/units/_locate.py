"""Where in a TOML text a key or value is: ``(table path, key)`` → line and column.

:mod:`tomllib` reports positions only for syntax errors, yet every validation problem
must point at the offending key. This module scans the raw text once and records where
each key and value starts: ``[table]`` and ``[[array]]`` headers, ``key = value`` lines,
dotted and quoted keys, arrays (elements are addressed by index) and inline tables.

Linear in time and memory, whatever the text: a key path is never materialised as a
tuple while scanning (``[a.a.a…]`` with 20,000 parts would make 20,000 tuples of up to
20,000 elements). Paths live in a trie instead: each node is a small integer, a child
is one dict entry ``(parent, part) → node``, so every key part costs O(1) and a lookup
costs O(len(path)).

The same scan finds keys with absurdly many dotted parts (``max_key_parts``): tomllib
itself is quadratic in the parts of one key (a 40 KB dotted key takes it seconds and
gigabytes), so the parser asks here first and never hands such a text to tomllib.

It is best effort by design: anything it cannot follow leaves that part unrecorded, and
lookups fall back to the nearest enclosing key, then to line 1, column 1.
"""

from __future__ import annotations

import bisect
import re
import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

KeyPath = tuple[str | int, ...]

_ROOT = 0  # the trie node of the empty path (the document)
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
    """Positions of the keys and values of one TOML text (1-based line and column).

    ``max_key_parts``: stop at the first key written with more dotted parts than this
    and report where it is in :attr:`overlong_key` (None: no such key, or no limit).
    """

    def __init__(self, text: str, *, max_key_parts: int | None = None) -> None:
        self._starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self._paths = _Paths()
        self.overlong_key: tuple[int, int] | None = None
        self.complete = False  # the scan followed the whole text (always, for valid TOML)
        scanner = _Scanner(text, self._paths, max_key_parts)
        try:
            scanner.document()
            self.complete = True
        except _KeyTooLong as err:
            self.overlong_key = self._position(err.offset)
        except (ValueError, IndexError, RecursionError):
            pass  # best effort: what was recorded before the scanner lost its way still helps

    def key(self, path: KeyPath) -> tuple[int, int]:
        """Where the key at ``path`` is written, else its nearest recorded ancestor."""
        offset = self._paths.nearest(path)
        return (1, 1) if offset is None else self._position(offset)

    def has(self, path: KeyPath) -> bool:
        """Whether the key or value at exactly ``path`` was found (for tests of the scan)."""
        return self._paths.recorded(path)

    def value(self, path: KeyPath) -> tuple[int, int]:
        """Where the value at ``path`` starts, else where its key is (see :meth:`key`)."""
        offset = self._paths.value_of(path)
        return self.key(path) if offset is None else self._position(offset)

    def _position(self, offset: int) -> tuple[int, int]:
        line = bisect.bisect_right(self._starts, offset)
        return line, offset - self._starts[line - 1] + 1


class _Paths:
    """A trie of key paths with the offset of each path's key and value (first one wins)."""

    def __init__(self) -> None:
        self._children: dict[tuple[int, str | int], int] = {}
        self._keys: dict[int, int] = {}
        self._values: dict[int, int] = {}
        self.array_tables: dict[int, int] = {}  # node of [[path]] → headers seen so far

    def child(self, node: int, part: str | int) -> int:
        """The node of ``path + (part,)`` given the node of ``path``; created when new."""
        return self._children.setdefault((node, part), len(self._children) + 1)

    def record_key(self, node: int, offset: int) -> None:
        self._keys.setdefault(node, offset)

    def record_value(self, node: int, offset: int) -> None:
        self._values.setdefault(node, offset)

    def nearest(self, path: KeyPath) -> int | None:
        """Offset of the deepest recorded prefix of ``path`` (its key, else its value)."""
        node, found = _ROOT, None
        for part in path:
            next_node = self._children.get((node, part))
            if next_node is None:
                break
            node = next_node
            offset = self._keys.get(node, self._values.get(node))
            found = found if offset is None else offset
        return found

    def value_of(self, path: KeyPath) -> int | None:
        """Offset of the value at exactly ``path``, if one was recorded."""
        node = self._find(path)
        return None if node is None else self._values.get(node)

    def recorded(self, path: KeyPath) -> bool:
        node = self._find(path)
        return node is not None and (node in self._keys or node in self._values)

    def _find(self, path: KeyPath) -> int | None:
        node = _ROOT
        for part in path:
            next_node = self._children.get((node, part))
            if next_node is None:
                return None
            node = next_node
        return node


class _KeyTooLong(Exception):
    """A key with more dotted parts than allowed starts at ``offset``."""

    def __init__(self, offset: int) -> None:
        super().__init__(offset)
        self.offset = offset


class _Scanner:
    """A forgiving recursive-descent walk over TOML that records offsets, nothing else."""

    def __init__(self, text: str, paths: _Paths, max_key_parts: int | None) -> None:
        self.text = text
        self.i = 0
        self.paths = paths
        self.max_key_parts = max_key_parts

    def document(self) -> None:
        table = _ROOT
        while True:
            self.skip(_BLANK)
            if self.i >= len(self.text):
                return
            if self.text[self.i] == "[":
                table = self.header()
            else:
                self.keyval(table)
            self.skip(_LINE_REST)

    def header(self) -> int:
        start = self.i
        is_array = self.text.startswith("[[", self.i)
        self.i += 2 if is_array else 1
        node = self.key_parts(_ROOT, header=True)
        self.skip(_WS)
        closing = "]]" if is_array else "]"
        if not self.text.startswith(closing, self.i):
            raise ValueError("unterminated table header")
        self.i += len(closing)
        if not is_array:
            return node
        index = self.paths.array_tables.get(node, 0)
        self.paths.array_tables[node] = index + 1
        element = self.paths.child(node, index)
        self.paths.record_key(element, start)
        return element

    def keyval(self, table: int) -> None:
        node = self.key_parts(table)
        self.skip(_WS)
        if not self.text.startswith("=", self.i):
            raise ValueError("expected '='")
        self.i += 1
        self.skip(_WS)
        self.value(node)

    def key_parts(self, node: int, *, header: bool = False) -> int:
        """Scan a (dotted) key below ``node``; its node. In a header, a part that names
        an array of tables (``[[arr]]`` seen before) continues in its latest element."""
        self.skip(_WS)
        first, parts = self.i, 0
        while True:
            self.skip(_WS)
            start = self.i
            node = self.paths.child(node, self.simple_key())
            self.paths.record_key(node, start)
            parts += 1
            if self.max_key_parts is not None and parts > self.max_key_parts:
                raise _KeyTooLong(first)
            self.skip(_WS)
            if not self.text.startswith(".", self.i):
                return node
            self.i += 1
            count = self.paths.array_tables.get(node) if header else None
            if count:
                node = self.paths.child(node, count - 1)

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

    def value(self, node: int) -> None:
        self.paths.record_value(node, self.i)
        char = self.text[self.i]
        if char == "[":
            self.array(node)
        elif char == "{":
            self.inline_table(node)
        else:
            for pattern in (_ML_BASIC, _ML_LITERAL, _BASIC, _LITERAL, _SCALAR):
                match = pattern.match(self.text, self.i)
                if match:
                    self.i = match.end()
                    return
            raise ValueError("expected a value")

    def array(self, node: int) -> None:
        self.i += 1
        index = 0
        while True:
            self.skip(_BLANK)
            if self.text[self.i] == "]":
                self.i += 1
                return
            self.value(self.paths.child(node, index))
            index += 1
            self.skip(_BLANK)
            if self.text[self.i] == ",":
                self.i += 1

    def inline_table(self, node: int) -> None:
        self.i += 1
        while True:
            self.skip(_BLANK)
            if self.text[self.i] == "}":
                self.i += 1
                return
            self.keyval(node)
            self.skip(_BLANK)
            if self.text[self.i] == ",":
                self.i += 1

    def skip(self, pattern: re.Pattern[str]) -> None:
        match = pattern.match(self.text, self.i)
        if match:
            self.i = match.end()
