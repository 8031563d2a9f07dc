"""``events.jsonl``: the run's events appended as JSON lines, and read back.

:class:`EventLog` writes (one ``write`` a line, never through a symlink; a failed write
is a fault, not an error); :func:`read_events` reads, skipping what it cannot parse (a
torn last line, a kind a newer ddsup wrote). The events themselves are ``_events``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from ddsup.record._event_parse import parse_event
from ddsup.record._events import RecordedEvent
from ddsup.record._faults import WriteFaults
from ddsup.record._private import open_append

_LINE = json.JSONEncoder(sort_keys=True).encode
"""One event's line, as ``json.dumps(sort_keys=True)`` writes it, without building an
encoder for each: a start of 1,024 lanes writes ~4,000 lines on the controller's loop."""


class EventLog:
    """Appends events to ``events.jsonl``, one ``write`` a line, so a crash loses nothing.

    A write that fails (a full or read-only disk) is a fault for ``faults``, never an
    error: the run goes on. The next event is tried again; when part of a line made it
    to the file, a newline ends that torn line first, so readers skip one line only.
    """

    def __init__(
        self,
        path: Path,
        faults: WriteFaults | None = None,
        opener: Callable[[Path], int] = open_append,
    ) -> None:
        """``opener`` opens ``path`` for appending (a held state directory's
        ``StateDir.append``; by default the path itself, never through a symlink)."""
        self._path = path
        self._opener = opener
        self._faults = faults or WriteFaults()
        self._fd: int | None = None
        self._closed = False
        self._torn = False
        self._open()

    def _open(self) -> None:
        try:
            self._fd = self._opener(self._path)
        except OSError as err:
            self._faults.failed(self._path, err)

    def write(self, event: RecordedEvent) -> None:
        if self._closed:
            return
        if self._fd is None:
            self._open()
            if self._fd is None:
                return
        line = (_LINE(event.to_json()) + "\n").encode()
        pending = memoryview(b"\n" + line if self._torn else line)
        try:
            while pending:
                pending = pending[os.write(self._fd, pending) :]
            self._torn = False
        except OSError as err:
            self._torn = self._torn or len(pending) < len(line)
            self._faults.failed(self._path, err)

    def close(self) -> None:
        self._closed = True
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def read_events(path: Path) -> list[RecordedEvent]:
    """All events of a run, oldest first; lines that are not an event are skipped.

    The last line of a run that was killed mid-write is torn, and a newer ddsup may have
    written kinds this one does not know: neither may stop ``status`` from reading the rest.
    FileNotFoundError when there is no such file.
    """
    events = []
    with path.open(encoding="utf-8", errors="replace") as handle:
        for line in handle:
            try:
                events.append(parse_event(json.loads(line)))
            except (ValueError, TypeError, KeyError):
                continue
    return events
