"""Reading an instance's log: its current file and the rotated ones before it.

``logs/<instance>.log`` is the newest output; at ``log_max_size`` ddsup renames it to
``<instance>.log.1`` (the one before becomes ``.log.2``, …; see
:mod:`ddsup.process._output_log`). Readers (``ddsup logs``, the console's last lines of
a failed unit) go through these helpers so that they see the files in that order.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ddsup.process import rotated_log

_ROTATED = re.compile(r"\.log\.(\d+)$")


def log_files(path: Path) -> list[Path]:
    """The files of one log, oldest first: ``.log.N`` … ``.log.1``, then ``.log``."""
    older = []
    for candidate in path.parent.glob(f"{glob_escape(path.name)}.*"):
        match = _ROTATED.search(candidate.name)
        if match and candidate.name == rotated_log(path, int(match.group(1))).name:
            older.append((int(match.group(1)), candidate))
    return [p for _n, p in sorted(older, reverse=True)] + ([path] if path.exists() else [])


def glob_escape(name: str) -> str:
    """``name`` with glob's special characters taken literally (``lane@[0]`` is a name)."""
    return re.sub(r"([*?\[])", r"[\1]", name)


def tail_offset(path: Path, start: int, lines: int) -> int:
    """The offset of the last ``lines`` lines of ``path`` at or after ``start``."""
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        return start
    with handle:
        end = handle.seek(0, os.SEEK_END)
        position, newlines = end, 0
        if lines == 0:
            return end
        while position > start:
            step = min(65536, position - start)
            position -= step
            handle.seek(position)
            block = handle.read(step)
            if position + step == end and block.endswith(b"\n"):
                block = block[:-1]  # the final newline ends the last line; it starts none
            for index in range(len(block) - 1, -1, -1):
                if block[index] == 0x0A:
                    newlines += 1
                    if newlines == lines:
                        return position + index + 1
        return start


def last_lines(path: Path, count: int, *, limit: int = 64 * 1024) -> list[str]:
    """The last ``count`` lines of a log (from the rotated file too when the new one is
    short), decoded leniently; at most ``limit`` bytes are read."""
    found: list[str] = []
    for file in reversed(log_files(path)):
        try:
            size = file.stat().st_size
            with file.open("rb") as handle:
                handle.seek(max(tail_offset(file, 0, count - len(found)), size - limit))
                data = handle.read(limit)
        except OSError:
            continue
        found = data.decode("utf-8", errors="replace").splitlines() + found
        if len(found) >= count:
            break
    return found[-count:] if count else []
