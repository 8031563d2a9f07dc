"""The endpoint's time series: per lane and interval, what went through it.

The request path calls four hooks (:class:`SeriesRecorder`): ``started(lane)`` when an
attempt goes to a lane, ``sent(lane, n)`` for body bytes relayed to the client,
``finished(lane, status)`` when the attempt ends (status 0: no whole response, the
lane's fault; :data:`CUT`: cut short by the client hanging up or by the endpoint's own
stop, which the lane cannot help), and ``refused(model, status)`` when the endpoint
answers a request itself with an error; and, in the process that samples the lanes'
``/metrics``, ``cached(lane, queries, hits)`` with what a lane's prefix-cache counters
added (:mod:`._prefix_cache`).
Each is a dict lookup and a few integer additions; the clock is read only when a lane
goes from idle to busy or back, which is what makes ``busy`` (seconds with at least one
request outstanding) exact. Without a state directory the endpoint gets
:data:`NO_SERIES`, whose hooks do nothing.

:func:`write_series` (a task of the server's nursery) turns the counters into lines
of ``series/endpoint-<pid>.jsonl`` in the state directory, once per ``interval``, in a
worker thread: a write to a shared file system may stall, and the event loop must not.
Size is bounded by a token bucket (:class:`SizeBudget`): lines are written every
interval while the budget allows, and otherwise held back, so that one line then covers
several intervals. The format is :mod:`ddsup.record._series`'s.
"""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypedDict

import trio

from ddsup._errors import StateDirError
from ddsup.record import CUT, SERIES_DIR, header_line, open_private_dir, series_file_name

log = logging.getLogger("ddsup.endpoint")

INTERVAL = 1.0  # seconds per line, while the size budget allows
MIB = 1024 * 1024

_monotonic = time.monotonic  # module names, so tests can drive the clocks
_wall = time.time


class SeriesCounts(TypedDict, total=False):
    """What one line of the series counted over its span (:meth:`SeriesRecorder.take`).

    ``counts`` holds six numbers per lane of ``lanes``, in its order: started, finished,
    failed, outstanding, busy seconds, bytes sent. The rest is written only when it
    happened: requests ``cut`` per lane, ``refused`` per model and status, the lanes'
    ``prefix_cache`` (queries, hits), the ``first`` request's and the ``quiet`` time.
    """

    lanes: list[str]
    counts: list[float]
    cut: dict[str, int]
    refused: dict[str, dict[str, int]]
    prefix_cache: dict[str, list[int]]
    first: float
    quiet: float


class SeriesLine(SeriesCounts, total=False):
    """A line as written: the counts, with its time ``t`` and the span ``d`` it covers."""

    t: float
    d: float


class SeriesHooks(Protocol):
    """What the request path calls; :class:`SeriesRecorder` and :data:`NO_SERIES` have it."""

    def started(self, lane: str) -> None: ...
    def sent(self, lane: str, nbytes: int) -> None: ...
    def finished(self, lane: str, status: int) -> None: ...
    def refused(self, model: str, status: int) -> None: ...
    def cached(self, lane: str, queries: float, hits: float) -> None: ...


class _NoSeries:
    """The endpoint has no state directory (standalone): nothing is recorded."""

    def started(self, lane: str) -> None:
        pass

    def sent(self, lane: str, nbytes: int) -> None:
        pass

    def finished(self, lane: str, status: int) -> None:
        pass

    def refused(self, model: str, status: int) -> None:
        pass

    def cached(self, lane: str, queries: float, hits: float) -> None:
        pass


NO_SERIES: SeriesHooks = _NoSeries()


class CacheHandover(_NoSeries):
    """The hooks of a process that samples the lanes but serves nothing (the parent of
    several workers): what the lanes' prefix-cache counters added waits here until
    :meth:`take` hands it to a worker, whose series records it."""

    def __init__(self) -> None:
        self._cached: dict[str, list[float]] = {}

    def cached(self, lane: str, queries: float, hits: float) -> None:
        counters = self._cached.setdefault(lane, [0.0, 0.0])
        counters[0] += queries
        counters[1] += hits

    def take(self) -> tuple[tuple[str, float, float], ...]:
        taken = tuple((lane, q, h) for lane, (q, h) in self._cached.items())
        self._cached = {}
        return taken


class _Lane:
    """One lane's counters since the last line (``outstanding`` and ``busy_since`` carry on)."""

    __slots__ = (
        "busy",
        "busy_since",
        "bytes",
        "cut",
        "failed",
        "finished",
        "idle_since",
        "outstanding",
        "started",
    )

    def __init__(self) -> None:
        self.started = self.finished = self.failed = self.outstanding = self.bytes = 0
        self.cut = 0  # attempts cut short by the client or the endpoint's stop
        self.busy = 0.0  # closed busy seconds since the last line
        self.busy_since = 0.0  # monotonic start of the open busy period (outstanding > 0)
        self.idle_since = -math.inf  # monotonic time outstanding last fell to 0


class SeriesRecorder:
    """In-memory counters per lane, filled by the request path, emptied by the writer."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory  # where write_series puts this process's file
        self._lanes: dict[str, _Lane] = {}
        self._refused: dict[tuple[str, int], int] = {}
        self._cached: dict[str, list[float]] = {}  # lane → [queries, hits] since the last line
        self.first: float | None = None  # monotonic time of the first request
        self._first_written = False
        self._taken_at = _monotonic()

    # --- the hooks (hot path) -------------------------------------------------------
    def started(self, lane: str) -> None:
        counters = self._lanes.get(lane)
        if counters is None:
            counters = self._lanes[lane] = _Lane()
        if not counters.outstanding:
            counters.busy_since = now = _monotonic()
            if self.first is None:
                self.first = now
        counters.outstanding += 1
        counters.started += 1

    def sent(self, lane: str, nbytes: int) -> None:
        counters = self._lanes.get(lane)
        if counters is not None:
            counters.bytes += nbytes

    def finished(self, lane: str, status: int) -> None:
        counters = self._lanes.get(lane)
        if counters is None:
            return
        if 0 < status < 500:
            counters.finished += 1
        elif status == CUT:
            counters.cut += 1
        else:
            counters.failed += 1
        counters.outstanding -= 1
        if not counters.outstanding:
            counters.idle_since = now = _monotonic()
            counters.busy += now - counters.busy_since

    def refused(self, model: str, status: int) -> None:
        key = (model, status)
        self._refused[key] = self._refused.get(key, 0) + 1

    def cached(self, lane: str, queries: float, hits: float) -> None:
        counters = self._cached.get(lane)
        if counters is None:
            self._cached[lane] = [queries, hits]
        else:
            counters[0] += queries
            counters[1] += hits

    # --- the writer's side ----------------------------------------------------------
    def active(self) -> bool:
        """Anything to write: a counter moved, or a lane is busy, since the last line."""
        if self._refused or self._cached:
            return True
        return any(
            c.started or c.finished or c.failed or c.cut or c.outstanding or c.busy
            for c in self._lanes.values()
        )

    def take(self, wall_offset: float) -> SeriesCounts:
        """The counts since the last take (``t``/``d`` are the writer's); resets them.

        ``wall_offset`` turns monotonic times into Unix times (``time.time() -
        time.monotonic()`` now). Lanes without activity are left out, and forgotten.
        """
        now = _monotonic()
        lanes: list[str] = []
        counts: list[float] = []
        quiet, busy_lanes = -math.inf, 0
        cut: dict[str, int] = {}
        for name, c in list(self._lanes.items()):
            busy = c.busy
            if c.outstanding:
                busy += now - c.busy_since
                c.busy_since = now
                busy_lanes += 1
            if not (c.started or c.finished or c.failed or c.cut or c.outstanding or busy):
                del self._lanes[name]
                continue
            lanes.append(name)
            counts += (c.started, c.finished, c.failed, c.outstanding, round(busy, 3), c.bytes)
            if c.cut:
                cut[name] = c.cut
            c.started = c.finished = c.failed = c.cut = c.bytes = 0
            c.busy = 0.0
            quiet = max(quiet, c.idle_since)
        line: SeriesCounts = {"lanes": lanes, "counts": counts}
        if cut:
            line["cut"] = cut
        if self._refused:
            refused: dict[str, dict[str, int]] = {}
            for (model, status), n in self._refused.items():
                refused.setdefault(model, {})[str(status)] = n
            line["refused"] = refused
            self._refused = {}
        if self._cached:
            line["prefix_cache"] = {
                lane: [round(q), round(h)] for lane, (q, h) in self._cached.items()
            }
            self._cached = {}
        if self.first is not None and not self._first_written:
            line["first"] = round(self.first + wall_offset, 3)
            self._first_written = True
        if lanes and not busy_lanes and quiet > self._taken_at:
            line["quiet"] = round(quiet + wall_offset, 3)
        self._taken_at = now
        return line


@dataclass(frozen=True)
class SizeBudget:
    """A token bucket over the bytes written: ``burst`` at once, then ``per_hour``.

    The file of one endpoint process therefore stays within ``burst + per_hour × hours``
    and one line (32 MiB + 4 MiB an hour: 128 MiB for a 24-hour run). Up to about 30 busy lanes
    never meet the limit; with hundreds, the first hours of a run are recorded every
    interval and later lines each cover several intervals.
    """

    burst: int = 32 * MIB
    per_hour: int = 4 * MIB


class _Bucket:
    def __init__(self, budget: SizeBudget, now: float) -> None:
        self.budget = budget
        self.tokens = float(budget.burst)
        self.at = now

    def refill(self, now: float) -> None:
        rate = self.budget.per_hour / 3600.0
        self.tokens = min(float(self.budget.burst), self.tokens + (now - self.at) * rate)
        self.at = now


def open_series(environ: Mapping[str, str]) -> SeriesHooks:
    """A recorder into ``$DDSUP_STATE_DIR/series`` (``ddsup start`` sets it for every unit),
    or :data:`NO_SERIES` for an endpoint run on its own."""
    state_dir = environ.get("DDSUP_STATE_DIR")
    return SeriesRecorder(Path(state_dir) / SERIES_DIR) if state_dir else NO_SERIES


async def write_series(
    hooks: SeriesHooks, *, interval: float = INTERVAL, budget: SizeBudget | None = None
) -> None:
    """Append a line per ``interval`` with activity until cancelled, then a last one.

    Never ends the endpoint: a state directory that cannot be written is logged once and
    the endpoint serves on without a series. Returns at once for :data:`NO_SERIES`.
    """
    if not isinstance(hooks, SeriesRecorder):
        return
    try:
        fd = await trio.to_thread.run_sync(_open_file, hooks.directory)
    except OSError as err:
        where = hooks.directory
        log.warning("no time series: cannot write in %s (%s)", where, err.strerror or err)
        return
    writer = _Writer(hooks, fd, budget or SizeBudget())
    try:
        await trio.to_thread.run_sync(writer.write, header_line(os.getpid(), interval, _wall()))
        while True:
            # wall-clock boundaries, not the monotonic clock: lines of several endpoint
            # processes (and the run's events) then share the same seconds
            now = _wall()
            await trio.sleep((math.floor(now / interval) + 1) * interval - now)
            await writer.tick(final=False)
    except OSError as err:
        log.warning("time series stopped: %s", err.strerror or err)
    finally:
        with trio.CancelScope(shield=True):
            try:
                await writer.tick(final=True)
            except OSError as err:
                log.warning("time series: the last line was lost: %s", err.strerror or err)
            os.close(fd)


class _Writer:
    """Decides when a line is written (activity, size budget) and writes it."""

    def __init__(self, recorder: SeriesRecorder, fd: int, budget: SizeBudget) -> None:
        self.recorder = recorder
        self.fd = fd
        self.bucket = _Bucket(budget, _monotonic())
        self.span_start = _wall()
        self.last_size = 0

    async def tick(self, *, final: bool) -> None:
        recorder, wall = self.recorder, _wall()
        if not recorder.active():
            self.span_start = wall  # nothing happened: the next line starts here
            return
        self.bucket.refill(_monotonic())
        if not final and self.bucket.tokens < self.last_size:
            return  # over budget: keep counting, a later line covers this span too
        span: SeriesLine = {"t": round(wall, 3), "d": round(wall - self.span_start, 3)}
        line: SeriesLine = {**span, **recorder.take(wall - _monotonic())}
        text = json.dumps(line, separators=(",", ":")) + "\n"
        self.span_start = wall
        self.last_size = len(text)
        self.bucket.tokens -= len(text)
        await trio.to_thread.run_sync(self.write, text)

    def write(self, text: str) -> None:
        os.write(self.fd, text.encode())


def _open_file(directory: Path) -> int:
    """``directory/endpoint-<pid>.jsonl`` for appending: 0700/0600, no symlink followed,
    in a state directory (``directory``'s parent) that is ours and private."""
    try:
        state = open_private_dir(directory.parent, directory.parent, error=StateDirError)
    except StateDirError as err:
        raise PermissionError(errno.EPERM, str(err)) from None
    try:
        series = state.subdirectory(directory.name, error=StateDirError)
    except StateDirError as err:
        raise PermissionError(errno.EPERM, str(err)) from None
    finally:
        state.close()
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
        return os.open(series_file_name(os.getpid()), flags, 0o600, dir_fd=series.fd)
    finally:
        series.close()
