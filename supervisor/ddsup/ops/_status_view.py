"""The status of a run as ``ddsup status`` reports it, from a live snapshot or from files.

A live run answers with its :class:`~ddsup.record._status.RunSnapshot`; a finished (or
unreachable) one is described from its state directory: ``plan.json`` for where each
instance was planned, ``events.jsonl`` replayed through the same fold the live run uses
(:class:`~ddsup.record._instance.InstanceRecord`). :meth:`StatusView.to_json` is the
documented ``status --json`` object (docs/operating.md; fields are only ever added).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TypedDict

from ddsup._errors import RunStateError
from ddsup._json import Json
from ddsup.ops._run_handle import events_of
from ddsup.ops._supervisor_metrics import LaneCount, lane_counts
from ddsup.record import (
    Contained,
    FieldReader,
    InstanceStatus,
    InstanceStatusJson,
    Outcome,
    OutcomeJson,
    RecordedEvent,
    RunFinished,
    RunSnapshot,
    StateDir,
    fold,
    incomplete,
    planned_facts,
)
from ddsup.units import UnitType

STATUS_FORMAT = 1


class EndpointJson(TypedDict):
    """``status --json``'s ``endpoint`` (:class:`EndpointProcesses`)."""

    pid: int
    port: int
    workers: list[int]


class LaneCountJson(TypedDict):
    """``status --json``'s ``lanes``: a model's replicas, and how many of them are ready."""

    ready: int
    total: int


class StatusJson(TypedDict):
    """The ``status --json`` object (:meth:`StatusView.to_json`; docs/operating.md).

    ``containment`` holds, per supervisor, ``supervisor``, ``node``, ``summary`` and the
    open description of its layers that ``ddsup.process`` gives.
    """

    format: int
    invocation_id: str | None
    launcher: str | None
    state_dir: str
    unit_dir: str | None
    pid: int | None
    started_at: float | None
    ended_at: float | None
    uptime: float | None
    live: bool
    stopping: bool
    result: OutcomeJson | None
    ends_at: float | None
    time_left: float | None
    lanes: dict[str, LaneCountJson]
    instances: list[InstanceStatusJson]
    containment: list[dict[str, Json]]
    endpoint: EndpointJson | None
    record_incomplete: str | None
    attempt: int


@dataclass(frozen=True)
class EndpointProcesses:
    """The endpoint's processes as it publishes them while it serves (docs/cli.md).

    ``pid``: the process ``ddsup start`` started; ``workers``: the processes that serve
    its port (with one worker, ``pid`` itself).
    """

    pid: int
    port: int
    workers: tuple[int, ...]

    def to_json(self) -> EndpointJson:
        return {"pid": self.pid, "port": self.port, "workers": list(self.workers)}


@dataclass(frozen=True)
class StatusView:
    """Everything ``status`` shows about one run."""

    invocation_id: str | None
    launcher: str | None
    state_dir: str
    unit_dir: str | None
    pid: int | None
    started_at: float | None
    ended_at: float | None
    uptime: float | None
    live: bool
    stopping: bool
    result: Outcome | None
    instances: tuple[InstanceStatus, ...]
    ends_at: float | None = None  # a live Slurm run: its job's end time (time limit)
    time_left: float | None = None  # seconds until ends_at, when the view was made
    containment: tuple[Contained, ...] = ()  # the no-orphan layers of each supervisor
    endpoint: EndpointProcesses | None = None  # while the run's endpoint serves
    record_incomplete: str | None = None  # why its files miss part of the run (a full disk)
    attempt: int = 0  # the job's attempt in its state dir (earlier ones in attempts/)

    @cached_property
    def lanes(self) -> dict[str, LaneCount]:
        """Lane replicas per model (counted once: the header and ``--json`` both ask)."""
        return lane_counts(self.instances)

    def to_json(self) -> StatusJson:
        return {
            "format": STATUS_FORMAT,
            "invocation_id": self.invocation_id,
            "launcher": self.launcher,
            "state_dir": self.state_dir,
            "unit_dir": self.unit_dir,
            "pid": self.pid,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "uptime": self.uptime,
            "live": self.live,
            "stopping": self.stopping,
            "result": None if self.result is None else self.result.to_dict(),
            "ends_at": self.ends_at,
            "time_left": self.time_left,
            "lanes": {m: {"ready": c.ready, "total": c.total} for m, c in self.lanes.items()},
            "instances": [i.to_json() for i in self.instances],
            "containment": [_layers_json(c) for c in self.containment],
            "endpoint": None if self.endpoint is None else self.endpoint.to_json(),
            "record_incomplete": self.record_incomplete,
            "attempt": self.attempt,
        }


def _layers_json(contained: Contained) -> dict[str, Json]:
    """One supervisor's layers, its open description (``details``) after what is known."""
    known: dict[str, Json] = {
        "supervisor": contained.supervisor,
        "node": contained.node,
        "summary": contained.summary,
    }
    return {**known, **contained.details}


def status_view(state: StateDir, snapshot: RunSnapshot | None) -> StatusView:
    """The run's status: ``snapshot`` when the live run answered, else its files."""
    run = state.read_run()
    # a live run's snapshot says everything: its events (thousands of lines in a large
    # run) are read only for a finished or unreachable run
    events = events_of(state) if snapshot is None else []
    finished = [e for e in events if isinstance(e, RunFinished)]
    instances = snapshot.instances if snapshot is not None else _rows_from_files(state, events)
    ends_at = None if snapshot is None else snapshot.ends_at
    return StatusView(
        invocation_id=run.invocation_id,
        launcher=snapshot.launcher if snapshot is not None else run.launcher,
        state_dir=str(state.path),
        unit_dir=run.unit_dir,
        pid=run.pid,
        started_at=run.started_at,
        ended_at=finished[-1].time if finished else None,
        uptime=None if snapshot is None else snapshot.uptime,
        live=snapshot is not None,
        stopping=snapshot is not None and snapshot.stopping,
        result=None if snapshot is not None else state.read_result(),
        instances=instances,
        ends_at=ends_at,
        time_left=None if ends_at is None else round(max(0.0, ends_at - time.time()), 3),
        containment=_containment(events) if snapshot is None else snapshot.containment,
        endpoint=_endpoint(state) if snapshot is not None else None,
        record_incomplete=None if snapshot is not None else _record_incomplete(state),
        attempt=run.attempt,
    )


def _record_incomplete(state: StateDir) -> str | None:
    """Why a finished run's files miss part of it: what ``result.json`` says (``record``);
    without one, a state directory whose file system is full or read-only now (where
    the run may have ended without writing it). None: nothing known to be missing."""
    try:
        data = json.loads(state.result.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return _file_system_problem(state)
    except (OSError, ValueError):
        return None
    return incomplete(data.get("record")) if isinstance(data, dict) else None


def _file_system_problem(state: StateDir) -> str | None:
    try:
        found = os.statvfs(state.path)
    except OSError:
        return None
    if found.f_flag & os.ST_RDONLY:
        return "its state directory is read-only"
    if found.f_bavail == 0:
        return "its state directory is full"
    return None


def _endpoint(state: StateDir) -> EndpointProcesses | None:
    """What the live run's endpoint published; None before it serves, or for a torn file.

    The endpoint writes the file once it serves and removes it when it stops, so only a
    live run's is shown (a killed endpoint may leave a stale one behind).
    """
    try:
        data = json.loads(state.endpoint_workers.read_text())
        return EndpointProcesses(
            pid=int(data["pid"]),
            port=int(data["port"]),
            workers=tuple(int(pid) for pid in data["workers"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _containment(events: list[RecordedEvent]) -> tuple[Contained, ...]:
    """The latest report of each supervisor (``ddsup start``, every agent) on its layers."""
    latest = {(e.supervisor, e.node): e for e in events if isinstance(e, Contained)}
    return tuple(latest.values())


def _rows_from_files(state: StateDir, events: list[RecordedEvent]) -> tuple[InstanceStatus, ...]:
    """Instances of a finished (or unreachable) run: the plan, replayed through its events."""
    planned = _planned(state)
    records = fold(events)
    rows = []
    for row, _rank in planned:
        record = records.get(row.instance)
        rows.append(row if record is None else row.with_record(record))
    return tuple(rows)


def _planned(state: StateDir) -> list[tuple[InstanceStatus, int | None]]:
    """Each instance of ``plan.json`` as a row not started yet, with its rank."""
    if not state.plan.exists():
        return []
    data = state.read_json(state.plan)
    try:
        nodes = data.get("nodes") or []
        devices = {n["name"]: [str(d) for d in n.get("devices", ())] for n in nodes}
        return [_planned_row(item, devices) for item in data.get("instances", [])]
    except (AttributeError, KeyError, TypeError, ValueError) as err:
        raise RunStateError(f"cannot read {state.plan}: {err}") from err


def _planned_row(
    item: Mapping[str, Json], devices: Mapping[str, list[str]]
) -> tuple[InstanceStatus, int | None]:
    read = FieldReader(item)
    instance, gpus, rank = (
        read.text("instance"),
        read.integers("gpus"),
        read.optional_integer("rank"),
    )
    nnodes = read.optional_integer("nnodes") or 1
    row = InstanceStatus(
        instance=instance,
        unit=read.text("unit"),
        type=UnitType(read.text("type")),
        node=read.text("node"),
        gpus=gpus,
        port=read.optional_integer("port"),
        model=_served_model(read, rank),
        served_names=read.texts("served_names") if not rank else (),
    )
    on_node = devices.get(row.node, [])
    return replace(row, **planned_facts(instance, rank, nnodes, gpus, on_node)), rank


def _served_model(item: FieldReader, rank: int | None) -> str | None:
    """A lane replica's model (from ``plan.json``); ranks > 0 serve none."""
    if item.text("type") != UnitType.LANE.value or rank:
        return None
    model = item.optional_text("model")
    return model if model else item.text("unit").rstrip("@")  # plans before 0.1 had none
