"""A file named inside a directory held open, and the path it is shown as.

A run's logs go into its state directory's ``logs/``, which ``ddsup start`` and each
node agent hold open from the moment they made or checked it
(``record._private.HeldDir``). A log is then its directory's descriptor and its name:
opening, rotating and removing it never go through a path that could since name another
directory (one renamed in, or a symlink). A plain path still works where no directory is
held (tests, tools). Standard library only: ``_popen`` uses it before trio is imported.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class FileAt:
    """``name`` in the directory held by ``dir_fd``; ``shown`` is its path, for messages."""

    dir_fd: int
    name: str
    shown: str

    def __str__(self) -> str:
        return self.shown


LogFile = FileAt | Path
"""Where a log is written: a file in a held directory, or a path."""


def open_file(target: LogFile | os.PathLike[str], flags: int, mode: int = 0o600) -> int:
    """``os.open`` of ``target`` (never through a symlink: ``flags`` say ``O_NOFOLLOW``)."""
    if isinstance(target, FileAt):
        return os.open(target.name, flags, mode, dir_fd=target.dir_fd)
    return os.open(target, flags, mode)


def renamed(target: LogFile, name: str) -> LogFile:
    """The file called ``name`` beside ``target``."""
    if isinstance(target, FileAt):
        return FileAt(target.dir_fd, name, os.path.join(os.path.dirname(target.shown), name))
    return target.with_name(name)


def unlink_file(target: LogFile) -> None:
    """Remove ``target``; FileNotFoundError when it is not there."""
    if isinstance(target, FileAt):
        os.unlink(target.name, dir_fd=target.dir_fd)
    else:
        target.unlink()


def replace_file(source: LogFile, destination: LogFile) -> None:
    """Rename ``source`` over ``destination`` (both in the same directory)."""
    if isinstance(source, FileAt) and isinstance(destination, FileAt):
        os.replace(
            source.name, destination.name, src_dir_fd=source.dir_fd, dst_dir_fd=destination.dir_fd
        )
    else:
        os.replace(str(source), str(destination))
