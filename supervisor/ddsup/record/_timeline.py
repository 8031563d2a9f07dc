"""A run's events replayed into time: each instance's states as segments, and marks.

Pure functions over the typed lines of ``events.jsonl`` (``_run_files`` reads them): the report draws these segments,
and the efficiency table adds up their GPU-seconds. A run that has not finished yet ends
"now" (the caller's ``now``), so a live run's last states reach the right edge.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ddsup.record._events import EventLine
from ddsup.record._node_events import ExitLine
from ddsup.record._run_info import RunInfo


class MarkKind(str, enum.Enum):
    """Points in an instance's life worth a symbol on the timeline."""

    EXIT = "exit"  # its process ended on its own (crash, or a worker's end)
    RESTART = "restart"  # ddsup schedules a restart
    FAILED = "failed"  # the instance failed for good


@dataclass(frozen=True)
class Segment:
    """``[start, end)`` spent in ``state`` (the values of ``InstanceState``), and why."""

    start: float
    end: float
    state: str
    reason: str

    @property
    def seconds(self) -> float:
        return max(0.0, self.end - self.start)


@dataclass(frozen=True)
class Mark:
    """``ok``: an exit with status 0 (a worker's normal end), not a failure."""

    time: float
    kind: MarkKind
    text: str
    ok: bool = False


@dataclass(frozen=True)
class Life:
    """One instance from the run's start to its end: every second is in one segment."""

    instance: str
    segments: tuple[Segment, ...]
    marks: tuple[Mark, ...]
    restarts: int

    def seconds_in(self, state: str) -> float:
        return sum(s.seconds for s in self.segments if s.state == state)

    def spans(self, state: str) -> list[tuple[float, float]]:
        return [(s.start, s.end) for s in self.segments if s.state == state and s.end > s.start]


@dataclass(frozen=True)
class RunSpan:
    """When the run began and ended (``finished`` False: no end recorded, ``end`` is now)."""

    start: float
    end: float
    finished: bool
    stopping_at: float | None = None

    @property
    def seconds(self) -> float:
        return max(0.0, self.end - self.start)

    def clamp(self, time: float) -> float:
        """``time`` within the span."""
        return min(max(time, self.start), self.end)


def run_span(events: Sequence[EventLine], run: RunInfo, now: float) -> RunSpan:
    """The run's span from its ``run`` events (``run.json``'s ``started_at`` as a fallback)."""
    start = end = stopping = None
    for event in events:
        if event["event"] != "run":
            continue
        reason = event["reason"]
        if reason == "starting" and start is None:
            start = event["time"]
        elif reason == "stopping" and stopping is None:
            stopping = event["time"]
        elif reason == "finished":
            end = event["time"]
    if start is None:
        candidates = [run.started_at] if run.started_at else []
        candidates += [e["time"] for e in events[:1]]
        start = min(candidates) if candidates else now
    finished = end is not None
    return RunSpan(start, end if end is not None else max(now, start), finished, stopping)


def replay(events: Iterable[EventLine], instances: Iterable[str], span: RunSpan) -> dict[str, Life]:
    """Each instance's life within ``span`` (``inactive`` until its first transition)."""
    names = list(instances)
    state = {name: ("inactive", "not started yet", span.start) for name in names}
    segments: dict[str, list[Segment]] = {name: [] for name in names}
    marks: dict[str, list[Mark]] = {name: [] for name in names}
    restarts = dict.fromkeys(names, 0)
    for event in sorted(events, key=lambda e: e["time"]):
        if event["event"] == "exit" and event["instance"] in state:
            name, time = event["instance"], span.clamp(event["time"])
            ok = event["exit"] == {"code": 0}
            marks[name].append(Mark(time, MarkKind.EXIT, _exit_text(event), ok))
        elif event["event"] == "unit" and event["instance"] in state and event["to"]:
            name, time, to = event["instance"], span.clamp(event["time"]), event["to"]
            current, reason, since = state[name]
            segments[name].append(Segment(since, time, current, reason))
            state[name] = (to, event["reason"], time)
            restarts[name] = event["restarts"] or restarts[name]
            if to == "restarting":
                marks[name].append(Mark(time, MarkKind.RESTART, event["reason"]))
            elif to == "failed":
                marks[name].append(Mark(time, MarkKind.FAILED, event["reason"]))
    lives = {}
    for name in names:
        current, reason, since = state[name]
        segments[name].append(Segment(since, span.end, current, reason))
        kept = tuple(s for s in segments[name] if s.end > s.start)
        lives[name] = Life(name, kept, tuple(marks[name]), restarts[name])
    return lives


def _exit_text(event: ExitLine) -> str:
    return f"{event['reason']} (pid {event['pid']})"
