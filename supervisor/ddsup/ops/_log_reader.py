"""Reading instance logs for ``ddsup logs``: whole, from an offset, or followed.

Each log is read through an open handle that follows the file it was opened on, so
a rotation (``lane@3.log`` renamed to ``lane@3.log.1`` at ``log_max_size``) loses
nothing while following: the old file is read to its end before the new one is opened
from its start (like ``tail -F``). Lines are printed whole; with several logs each line
is prefixed by its instance, and on a terminal the prefixes are coloured and aligned
(one colour per instance, as ``docker compose logs`` does).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from ddsup.record import log_files, tail_offset

# Foreground colours for prefixes, in turn; red is left for errors.
_PALETTE = ("36", "33", "32", "35", "34", "96", "93", "92", "95", "94")


@dataclass
class _Followed:
    """One log: the file being read, and where."""

    path: Path
    handle: BinaryIO | None = None
    inode: int | None = None
    pending: list[tuple[Path, int]] = field(default_factory=list)  # older files, from where
    partial: bytes = b""  # a last line still waiting for its newline


class LogReader:
    """Prints the logs of some instances; :meth:`emit` prints what is new since last time."""

    def __init__(self, *, prefix: bool, colour: bool = False) -> None:
        self.prefix = prefix
        self.colour = colour
        self._logs: dict[str, _Followed] = {}
        self._width = 0

    @property
    def names(self) -> list[str]:
        return list(self._logs)

    def add(
        self, name: str, path: Path, start: int = 0, older: list[tuple[Path, int]] | None = None
    ) -> None:
        """Read ``name`` from ``start`` in its current file, after ``older`` rotated files
        (each from an offset, oldest first; see :func:`start_points`)."""
        if name in self._logs:
            return
        followed = _Followed(path, pending=list(older or ()))
        self._open(followed, start)
        self._logs[name] = followed
        self._width = max(self._width, len(name))

    def emit(self, out: BinaryIO, *, final: bool) -> None:
        """Print every complete new line (all of it, partial last lines too, when ``final``)."""
        for index, (name, followed) in enumerate(self._logs.items()):
            for data in self._new_data(followed, final=final):
                out.write(b"".join(self._lines(index, name, data)))
        out.flush()

    def close(self) -> None:
        for followed in self._logs.values():
            if followed.handle is not None:
                followed.handle.close()
                followed.handle = None

    # --- reading --------------------------------------------------------------------
    def _new_data(self, followed: _Followed, *, final: bool) -> Iterator[bytes]:
        while followed.pending:  # rotated files, oldest first
            yield _read_from(*followed.pending.pop(0))
        chunk = followed.partial + self._read(followed)
        if self._rotated(followed):  # renamed under us: finish it, then the new file
            chunk += self._read(followed)
            self._open(followed, 0)
            chunk += self._read(followed)
        if not final and not chunk.endswith(b"\n"):
            cut = chunk.rfind(b"\n") + 1
            chunk, followed.partial = chunk[:cut], chunk[cut:]
        else:
            followed.partial = b""
        if chunk:
            yield chunk

    def _open(self, followed: _Followed, start: int) -> None:
        if followed.handle is not None:
            followed.handle.close()
        followed.handle, followed.inode = None, None
        with contextlib.suppress(FileNotFoundError):
            handle = followed.path.open("rb")
            followed.inode = os.fstat(handle.fileno()).st_ino
            handle.seek(min(start, os.fstat(handle.fileno()).st_size))
            followed.handle = handle

    @staticmethod
    def _read(followed: _Followed) -> bytes:
        return followed.handle.read() if followed.handle is not None else b""

    @staticmethod
    def _rotated(followed: _Followed) -> bool:
        """The path now names another file (or a file appeared where there was none)."""
        try:
            inode = followed.path.stat().st_ino
        except FileNotFoundError:
            return False
        return inode != followed.inode

    # --- writing --------------------------------------------------------------------
    def _lines(self, index: int, name: str, data: bytes) -> Iterator[bytes]:
        if not self.prefix:
            yield data
            return
        if self.colour:
            code = _PALETTE[index % len(_PALETTE)]
            head = f"\x1b[{code}m{name.ljust(self._width)}\x1b[0m | ".encode()
        else:
            head = f"{name}: ".encode()
        for line in data.splitlines(keepends=True):
            yield head + (line if line.endswith(b"\n") else line + b"\n")


def _read_from(path: Path, offset: int) -> bytes:
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            return handle.read()
    except FileNotFoundError:  # rotated away meanwhile
        return b""


def start_points(path: Path, start: int, lines: int | None) -> tuple[int, list[tuple[Path, int]]]:
    """Where to print ``path`` from: an offset in it, and the rotated files before it.

    ``start`` 0 and no ``lines``: everything, the rotated files first. With ``lines``:
    the last ``lines`` lines from ``start`` on, reaching into the rotated files only when
    reading from the start and the current file holds fewer.
    """
    if lines is None:
        older = [(p, 0) for p in log_files(path) if p != path] if start == 0 else []
        return start, older
    offset = tail_offset(path, start, lines)
    have = _count_lines(path, offset)
    points: list[tuple[Path, int]] = []
    if start == 0:
        for file in reversed([p for p in log_files(path) if p != path]):  # newest first
            if have >= lines:
                break
            file_offset = tail_offset(file, 0, lines - have)
            points.insert(0, (file, file_offset))
            have += _count_lines(file, file_offset)
    return offset, points


def _count_lines(path: Path, start: int) -> int:
    data = _read_from(path, start)
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
