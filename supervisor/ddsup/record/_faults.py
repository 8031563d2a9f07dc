"""A run goes on when its records cannot be written; one warning says so.

A state directory on a full or read-only file system (or over quota) must not end a
run that is spending GPU hours: the events, plan, logs and result are its record, not
its work. Every place that writes them reports a failure here instead of raising;
the first one prints a single warning (a full disk fails every write, and a stream
of warnings would only fill the job's output too), later ones are counted. Writes keep
being tried, so the record resumes once space is freed; ``result.json`` falls back to
stderr (``run._controller``).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from ddsup.units import printable


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

    def failed(self, path: Path | str, err: OSError) -> None:
        """``path`` could not be written (or opened, or created) because of ``err``."""
        self.count += 1
        if self.first is not None:
            return
        self.first = err
        reason = err.strerror or str(err)
        self.warn(
            f"cannot write {printable(os.fspath(path))} ({reason}); the run goes on, "
            "but its record in the state directory is incomplete (further write errors are "
            "not reported)"
        )
