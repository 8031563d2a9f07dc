"""Log lines a client can cause: at most one per kind a minute, the rest counted.

A client decides how often the endpoint meets what it sends, so nothing it sends may
write a line each time: a flood of refused requests, each logged (with a traceback, for
a bug), would fill the disk under the log. A kind's first line is written; the next ones
within :data:`EVERY` seconds are counted, and the next line written says how many were
left out. Each process (each worker) keeps its own count.
"""

from __future__ import annotations

import logging
import time

log = logging.getLogger("ddsup.endpoint")

EVERY = 60.0  # seconds between two lines of one kind


class Notices:
    """When each kind was last logged, and how many of it were left out since."""

    __slots__ = ("_last", "_left_out")

    def __init__(self) -> None:
        self._last: dict[str, float] = {}
        self._left_out: dict[str, int] = {}

    def note(self, kind: str, level: int, message: str, *, exc_info: bool = False) -> None:
        """Log ``message`` unless a line of ``kind`` was written in the last minute."""
        now = time.monotonic()
        last = self._last.get(kind)
        if last is not None and now - last < EVERY:
            self._left_out[kind] = self._left_out.get(kind, 0) + 1
            return
        self._last[kind] = now
        left_out = self._left_out.pop(kind, 0)
        if left_out:
            message += f" ({left_out} more since the last such line, not logged)"
        log.log(level, "%s", message, exc_info=exc_info)


NOTICES = Notices()  # the process's: a worker serves every connection in one process
