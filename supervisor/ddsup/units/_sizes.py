"""Byte sizes in unit files (``log_max_size = "64M"``), as journald.conf writes them.

A size is a number of bytes (an integer) or a string with one of the suffixes ``K``,
``M``, ``G``, ``T`` (base 1024, as systemd reads them); decimals are allowed
(``"1.5G"``). A trailing ``B`` or ``iB`` is accepted and means the same (``"64MiB"``,
``"64MB"``): the unit is never guessed differently from what systemd would do.
"""

from __future__ import annotations

import re

_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*", re.IGNORECASE)
_FACTORS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
SIZE_PATTERN = r"^\s*\d+(\.\d+)?\s*([KMGTkmgt](i?[Bb])?|[Bb])?\s*$"
SIZE_HELP = 'a size: bytes (65536) or a string with K, M, G or T (base 1024), e.g. "64M"'


def parse_size(value: object) -> int:
    """Bytes of ``value`` (an int, or a string such as ``"64M"``); ValueError otherwise."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"a size cannot be negative, got {value}")
        return value
    if not isinstance(value, str):
        raise ValueError(f"expected {SIZE_HELP}")
    match = _SIZE.fullmatch(value)
    if match is None:
        raise ValueError(f"invalid size {value!r}; expected {SIZE_HELP}")
    number, suffix = match.groups()
    return int(float(number) * _FACTORS[suffix.upper()])


def format_size(size: int) -> str:
    """``64M``, ``1.5G``, ``512K``, ``100B``: the shortest exact-enough spelling."""
    for suffix in ("T", "G", "M", "K"):
        factor = _FACTORS[suffix]
        if size >= factor:
            return f"{size / factor:.3g}{suffix}"
    return f"{size}B"
