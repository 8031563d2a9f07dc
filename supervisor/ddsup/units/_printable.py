"""User-supplied text made safe to print on one terminal line.

Messages about unit files quote what the user (or whoever named the files) wrote: file
paths, unit names, keys, values. A file named ``"x\\x1b[31m.toml"`` or
``"x\\nfake.toml:1:1: error: …"`` must not colour the terminal, clear it, or forge a
line of ``ddsup verify``'s output that an editor or CI would believe. So every such
text goes through :func:`printable` before it is printed; ``units`` and ``plan`` use it
for every path and message they produce.

What is escaped, with Python's own escapes (``\\x1b``, ``\\n``, ``\\u202e``):

- control characters (C0, DEL, C1): escape sequences, newlines, carriage returns;
- format characters (bidirectional overrides and isolates, zero-width characters),
  which reorder or hide the text around them ("Trojan Source");
- line and paragraph separators;
- lone surrogates: the bytes of a file name that are not UTF-8 arrive as
  ``\\udcXX`` (PEP 383), which a strict terminal encoder would raise on; they are
  shown as the byte they stand for (``\\xff``).

Everything else, including non-ASCII letters and backslashes, is left as it is: the
result is for reading, not for parsing back.
"""

from __future__ import annotations

import unicodedata

_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: str) -> str:
    """``text`` with every character that could act on a terminal written as an escape."""
    if text.isprintable():
        return text  # the common case, checked in C: nothing to escape
    return "".join(_escape(char) for char in text)


def _escape(char: str) -> str:
    if unicodedata.category(char) not in _UNSAFE_CATEGORIES:
        return char
    if char in _SHORT:
        return _SHORT[char]
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:
        return f"\\x{code - 0xDC00:02x}"  # a byte of a non-UTF-8 file name (PEP 383)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"
