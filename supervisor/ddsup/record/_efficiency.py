"""Where the allocation's GPU time went: loading, serving, ready but idle, down.

The allocation's GPU time is every GPU of the plan's nodes from the run's start to its
end (now, for a live run). Each lane instance's GPUs are, at each moment, in one of:

- **loading**: the instance is ``starting`` (process started, not ready yet; after a
  restart too: the weights load again);
- **serving**: ``ready`` with at least one request outstanding through the endpoint
  (the series' ``busy``);
- **idle**: ``ready`` with none;
- **down**: everything else: before its first start, waiting for its stagger turn,
  ``restarting`` (the back-off), ``stopping``, exited or failed.

GPUs that no lane holds are **unused**. :func:`efficiency` is a pure function of the
plan, the events and the series; :func:`efficiency_line` and :func:`efficiency_json`
read a state directory and are what ``ddsup start`` and ``status --json`` show.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from ddsup.record._display import human_duration
from ddsup.record._events import EventLine
from ddsup.record._run_files import PlanFile, RunFiles, load_run
from ddsup.record._run_info import RunInfo
from ddsup.record._series import Series
from ddsup.record._timeline import RunSpan, replay, run_span

EFFICIENCY_FORMAT = 1
CATEGORIES = ("loading", "serving", "idle", "down")
MEANINGS = {
    "loading": "a lane's process runs and is not ready yet: its weights load (after a restart too)",
    "serving": "a lane is ready, with at least one request outstanding through the endpoint",
    "idle": "a lane is ready, with no request outstanding",
    "ready": "a lane is ready (serving or idle: without the endpoint's record, not known which)",
    "down": "a lane's GPUs with no process loading or ready: not started yet (its stagger "
    "turn, max_loading, a unit it starts after), restarting (the back-off), unresponsive, "
    "stopping, exited or failed",
    "unused": "GPUs of the allocation that no lane holds",
}
"""What each part of the GPU time is (the report's key; docs/operating.md's table)."""
DOWN = "lanes not started yet, restarting, stopping or ended"  # "down" on the line


class SecondsJson(TypedDict):
    """Seconds by category (:class:`GpuTime`)."""

    loading: float
    serving: float
    idle: float
    down: float


class AllocationSecondsJson(SecondsJson):
    """GPU-seconds by category, and those of GPUs no lane held."""

    unused: float


class LaneTimeJson(TypedDict):
    """One lane instance's part of the efficiency table (:class:`LaneTime`)."""

    instance: str
    node: str
    gpus: int
    restarts: int
    seconds: SecondsJson


class EfficiencyJson(TypedDict):
    """``status --json``'s ``efficiency`` (:meth:`Efficiency.to_json`; docs/operating.md)."""

    format: int
    line: str
    start: float
    end: float
    finished: bool
    allocation_gpus: int
    gpu_seconds: float
    seconds: AllocationSecondsJson
    shares: dict[str, float]
    requests_recorded: bool
    first_request_after: float | None
    last_request_before_end: float | None
    lanes: list[LaneTimeJson]


@dataclass(frozen=True)
class GpuTime:
    """Seconds by category (of one instance's wall time, or GPU-seconds once scaled)."""

    loading: float = 0.0
    serving: float = 0.0
    idle: float = 0.0
    down: float = 0.0

    @property
    def ready(self) -> float:
        return self.serving + self.idle

    @property
    def total(self) -> float:
        return self.loading + self.serving + self.idle + self.down

    def scaled(self, factor: float) -> GpuTime:
        return GpuTime(*(getattr(self, c) * factor for c in CATEGORIES))

    def __add__(self, other: GpuTime) -> GpuTime:
        return GpuTime(*(getattr(self, c) + getattr(other, c) for c in CATEGORIES))

    def as_dict(self) -> SecondsJson:
        return {
            "loading": round(self.loading, 3),
            "serving": round(self.serving, 3),
            "idle": round(self.idle, 3),
            "down": round(self.down, 3),
        }


@dataclass(frozen=True)
class LaneTime:
    """One lane instance (a rank of a multi-node replica counts on its own)."""

    instance: str
    node: str
    gpus: int
    time: GpuTime  # wall seconds of this instance, per category
    restarts: int

    @property
    def gpu_time(self) -> GpuTime:
        return self.time.scaled(self.gpus)


@dataclass(frozen=True)
class Efficiency:
    """The efficiency table of a run; ``has_series`` False: serving and idle are unknown."""

    span: RunSpan
    allocation_gpus: int
    lanes: tuple[LaneTime, ...]
    has_series: bool
    has_plan: bool = True
    first_request: float | None = None
    last_request: float | None = None

    @property
    def total(self) -> GpuTime:
        total = GpuTime()
        for lane in self.lanes:
            total += lane.gpu_time
        return total

    @property
    def allocation_seconds(self) -> float:
        return self.allocation_gpus * self.span.seconds

    @property
    def unused(self) -> float:
        return max(0.0, self.allocation_seconds - self.total.total)

    def shares(self) -> dict[str, float]:
        """Each category's share of the allocation's GPU time (0 … 1), ``unused`` last."""
        whole = self.allocation_seconds
        total = self.total
        values = {c: getattr(total, c) for c in CATEGORIES} | {"unused": self.unused}
        return {c: (v / whole if whole > 0 else 0.0) for c, v in values.items()}

    def line(self) -> str:
        return summary_line(self)

    def to_json(self) -> EfficiencyJson:
        span = self.span
        return {
            "format": EFFICIENCY_FORMAT,
            "line": self.line(),
            "start": span.start,
            "end": span.end,
            "finished": span.finished,
            "allocation_gpus": self.allocation_gpus,
            "gpu_seconds": round(self.allocation_seconds, 3),
            "seconds": {**self.total.as_dict(), "unused": round(self.unused, 3)},
            "shares": {c: round(v, 4) for c, v in self.shares().items()},
            "requests_recorded": self.has_series,
            "first_request_after": _after(span.start, self.first_request),
            "last_request_before_end": _after(self.last_request, span.end),
            "lanes": [
                {
                    "instance": lane.instance,
                    "node": lane.node,
                    "gpus": lane.gpus,
                    "restarts": lane.restarts,
                    "seconds": lane.time.as_dict(),
                }
                for lane in self.lanes
            ],
        }


def efficiency(
    plan: PlanFile | None,
    events: Sequence[EventLine],
    series: Series,
    run: RunInfo,
    now: float,
) -> Efficiency:
    """The efficiency table of a run from its plan, events and endpoint series."""
    span = run_span(events, run, now)
    planned = [i for i in (plan.instances if plan else ()) if i.is_lane]
    lives = replay(events, [i.instance for i in planned], span)
    samples = series.by_lane
    lanes = []
    for item in planned:
        life = lives[item.instance]
        loading = life.seconds_in("starting")
        ready_spans = life.spans("ready")
        ready = sum(end - start for start, end in ready_spans)
        lane_samples = samples.get(item.instance.split(":")[0])
        serving = min(ready, lane_samples.busy_within(ready_spans)) if lane_samples else 0.0
        down = max(0.0, span.seconds - loading - ready)
        time_split = GpuTime(loading, serving, ready - serving, down)
        lanes.append(
            LaneTime(item.instance, str(item.node), len(item.gpus), time_split, life.restarts)
        )
    node_gpus = sum(len(n.gpus) for n in (plan.nodes if plan else ()))
    return Efficiency(
        span=span,
        allocation_gpus=max(node_gpus, sum(lane.gpus for lane in lanes)),
        lanes=tuple(lanes),
        has_series=bool(series.lines) or series.files > 0,
        has_plan=plan is not None,
        first_request=series.first_request,
        last_request=series.last_request_end,
    )


def summary_line(eff: Efficiency) -> str:
    """``GPU time 3.2 h (8 GPUs × 24m00s): loading 9 %, serving 78 %, idle 11 %, down 2 %
    (lanes not started yet, …)`` (+ unused): the whole, what it is made of, and what
    "down" means wherever it is there."""
    if not eff.has_plan:
        return "GPU time: none (the run ended before it had a plan)"
    if eff.allocation_seconds <= 0:
        return "GPU time: none (no GPUs in the plan)"
    shares = eff.shares()
    if not eff.has_series:
        shares = {
            "loading": shares["loading"],
            "ready": shares["serving"] + shares["idle"],
            "down": shares["down"],
            "unused": shares["unused"],
        }
    if shares["unused"] < 0.005:
        del shares["unused"]
    percents = whole_percents(list(shares.values()))
    parts = [
        f"{name} {p} %" + (f" ({DOWN})" if name == "down" and p else "")
        for name, p in zip(shares, percents, strict=True)
    ]
    gpus = f"{eff.allocation_gpus} GPU{'s' * (eff.allocation_gpus != 1)}"
    whole = f"{gpu_time_text(eff.allocation_seconds)} ({gpus} × {human_duration(eff.span.seconds)})"
    text = f"GPU time {whole}: " + ", ".join(parts)
    if not eff.has_series:
        text += " (no endpoint request record: serving and idle unknown)"
    return text


def whole_percents(shares: list[float]) -> list[int]:
    """Shares as whole percents that add up to 100 (largest remainder first)."""
    total = sum(shares)
    if total <= 0:
        return [0] * len(shares)
    exact = [100 * s / total for s in shares]
    floors = [int(e) for e in exact]
    by_remainder = sorted(range(len(exact)), key=lambda i: floors[i] - exact[i])
    for i in by_remainder[: 100 - sum(floors)]:
        floors[i] += 1
    return floors


def gpu_time_text(seconds: float) -> str:
    """``0.4 s``, ``45 s``, ``12 min``, ``3.2 h``: GPU time at the precision a person reads."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _after(earlier: float | None, later: float | None) -> float | None:
    if earlier is None or later is None:
        return None
    return round(max(0.0, later - earlier), 3)


def efficiency_of(files: RunFiles, now: float | None = None) -> Efficiency:
    """:func:`efficiency` of a loaded run (``now`` defaults to the current time)."""
    when = time.time() if now is None else now
    return efficiency(files.plan, files.events, files.series, files.run, when)


def efficiency_line(state_dir: Path | str, now: float | None = None) -> str:
    """The one-line summary of the run in ``state_dir`` (for the end of ``ddsup start``)."""
    return efficiency_of(load_run(Path(state_dir)), now).line()


def efficiency_json(state_dir: Path | str, now: float | None = None) -> EfficiencyJson:
    """The efficiency table as JSON (for ``status --json``; docs/operating.md has its fields)."""
    return efficiency_of(load_run(Path(state_dir)), now).to_json()
