"""A run goes on when its records cannot be written; one warning says so.

A state directory on a full or read-only file system (or over quota) must not end a
run that is spending GPU hours: the events, plan, logs and result are its record, not
its work. Every place that writes them reports a failure here instead of raising;
the first one prints a single warning (a full disk fails every write, and a stream
of warnings would only fill the job's output too), later ones are counted. Writes keep
being tried, so the record resumes once space is freed; ``result.json`` falls back to
stderr (``controller._controller``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TextIO, TypedDict

from ddsup.units import printable


class FaultsJson(TypedDict):
    """What ``result.json``'s ``record`` says of the writes that failed (the first one's)."""

    faults: int
    errno: str | None
    error: str
    first: str


def say(text: str, stream: TextIO | None = None) -> None:
    """Write ``text`` to ``stream`` (stderr); when that fails, send the stream to /dev/null.

    ddsup's own output is often a file beside the state directory (Slurm's
    ``slurm-JOBID.out``), on the same full disk. Python flushes stderr again at exit,
    and a flush that fails there turns the exit status into 120: a run that ended 7
    must exit 7, so a stream that cannot be written is silenced for good.
    """
    stream = stream or sys.stderr
    try:
        stream.write(text)
        stream.flush()
    except (OSError, ValueError):
        silence(stream)


def silence(stream: TextIO) -> None:
    """Point ``stream``'s descriptor at /dev/null and drop what its buffer still holds."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
        stream.flush()


def _stderr(text: str) -> None:
    say(f"ddsup: warning: {text}\n")


class WriteFaults:
    """Failed writes of one process's records: the first is reported, all are counted."""

    def __init__(self, warn: Callable[[str], None] = _stderr) -> None:
        """``warn`` shows the one warning (default: a ``ddsup: warning:`` line on stderr)."""
        self.warn = warn
        self.count = 0
        self.first: OSError | None = None
        self.first_path = ""

    def failed(self, path: Path | str, err: OSError) -> None:
        """``path`` could not be written (or opened, or created) because of ``err``."""
        self.count += 1
        if self.first is not None:
            return
        self.first = err
        self.first_path = os.fspath(path)
        reason = err.strerror or str(err)
        self.warn(
            f"cannot write {printable(os.fspath(path))} ({reason}); the run goes on, "
            "but its record in the state directory is incomplete (further write errors are "
            "not reported)"
        )

    def to_json(self) -> FaultsJson | None:
        """What ``result.json`` says of them (``record``): None when there were none."""
        if self.first is None:
            return None
        code = self.first.errno
        return {
            "faults": self.count,
            "errno": errno.errorcode.get(code, str(code)) if code is not None else None,
            "error": self.first.strerror or str(self.first),
            "first": self.first_path,
        }


_WHY = {
    "ENOSPC": "the state directory was full",
    "EDQUOT": "the state directory's quota was used up",
    "EROFS": "the state directory was read-only",
}


def incomplete(record: object) -> str | None:
    """Why a run's record is incomplete, from ``result.json``'s ``record``; None when it
    is complete (or says nothing readable)."""
    if not isinstance(record, dict) or not record.get("faults"):
        return None
    why = _WHY.get(str(record.get("errno")), "the state directory could not be written")
    first = record.get("first")
    since = f", first {printable(os.path.basename(first))}" if isinstance(first, str) else ""
    return f"{why} ({printable(str(record.get('error')))}{since})"
