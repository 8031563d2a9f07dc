"""``events.jsonl`` itself: appending events as they happen, reading a run's back.

Apart from the event vocabulary (``ddsup.record._events``) because the file has its own
concerns: every line flushed at once (a crash loses nothing), and a reader that tolerates
the torn last line of a killed run and kinds a newer ddsup wrote.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TextIO

from ddsup.record._events import RecordedEvent, parse_event


class EventLog:
    """Appends events to ``events.jsonl``; each line is flushed so a crash loses nothing."""

    def __init__(self, path: Path) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._file: TextIO = os.fdopen(fd, "a", encoding="utf-8")

    def write(self, event: RecordedEvent) -> None:
        if self._file.closed:
            return
        self._file.write(json.dumps(event.to_json(), sort_keys=True) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


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
