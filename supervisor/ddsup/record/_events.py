"""Structured events: every state change of a run, one JSON object per line.

``events.jsonl`` is the run's durable record (and what tests assert on, never log text).
Each line has ``time`` (Unix seconds), ``event`` (what happened) and, for unit
transitions, ``instance``, ``node``, ``from``, ``to`` and ``reason``. Values of
environment variables never appear here: the event vocabulary has no field for them.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO


@dataclass(frozen=True)
class Event:
    """One thing that happened. ``details`` holds event-specific facts (pid, exit, …)."""

    event: str
    instance: str | None = None
    node: str | None = None
    from_state: str | None = None
    to_state: str | None = None
    reason: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)
    time: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"time": round(self.time, 6), "event": self.event}
        for key, value in (
            ("instance", self.instance),
            ("node", self.node),
            ("from", self.from_state),
            ("to", self.to_state),
            ("reason", self.reason),
        ):
            if value is not None:
                out[key] = value
        out.update(self.details)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Event:
        known = {"time", "event", "instance", "node", "from", "to", "reason"}
        return cls(
            event=str(data["event"]),
            instance=data.get("instance"),
            node=data.get("node"),
            from_state=data.get("from"),
            to_state=data.get("to"),
            reason=data.get("reason"),
            details={k: v for k, v in data.items() if k not in known},
            time=float(data.get("time", time.time())),
        )


class EventLog:
    """Appends events to ``events.jsonl``; each line is flushed so a crash loses nothing."""

    def __init__(self, path: Path) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._file: TextIO = os.fdopen(fd, "a", encoding="utf-8")

    def write(self, event: Event) -> None:
        if self._file.closed:
            return
        self._file.write(json.dumps(event.to_dict(), sort_keys=True) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def read_events(path: Path) -> list[dict[str, Any]]:
    """All events of a run, oldest first (for status, tests and tools)."""
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]
