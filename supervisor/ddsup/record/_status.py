"""A run's status: one typed row per instance, and the live run's snapshot of them all.

The live controller answers ``status`` with a :class:`RunSnapshot`; ``ddsup status``
builds the same :class:`InstanceStatus` rows for a finished run from ``plan.json`` and
``events.jsonl``. ``InstanceStatus.to_json`` is the documented row of ``status --json``
(docs/operating.md; :class:`InstanceStatusJson`), and ``from_json`` reads it back from the
control channel, as ``RunSnapshot``'s pair does the whole answer (:class:`SnapshotJson`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING, TypedDict

from ddsup._exit import ExitJson, ExitStatus
from ddsup._json import Json
from ddsup.record._event_parse import parse_event
from ddsup.record._events import Contained
from ddsup.record._fields import FieldReader
from ddsup.record._instance import InstanceRecord
from ddsup.record._node_events import ContainmentLine
from ddsup.record._outcome import exit_from_json
from ddsup.record._states import InstanceState
from ddsup.units import UnitType

if TYPE_CHECKING:  # only the controller's rows need a plan: ``status`` imports none
    from ddsup.plan import Plan

# states in which "attempt k of N" means something: making a start, or past a failed one
_ATTEMPTING = frozenset({InstanceState.STARTING, InstanceState.RESTARTING, InstanceState.FAILED})


class InstanceStatusJson(TypedDict):
    """One row of ``status --json``'s ``instances`` (:class:`InstanceStatus`)."""

    instance: str
    unit: str
    type: str
    node: str
    model: str | None
    served_names: list[str]
    gpus: list[int]
    port: int | None
    state: str
    since: float | None
    pid: int | None
    restarts: int
    last_exit: ExitJson | None
    reason: str | None
    probe: str | None
    ready_seconds: float | None
    attempt: int | None
    attempt_limit: int | None
    replica: str | None
    rank: int | None
    nnodes: int
    devices: list[str]
    liveness_failures: int
    until: float | None


class PlannedFacts(TypedDict):
    """The fields of a ``status`` row that come from the plan (:func:`planned_facts`)."""

    replica: str | None
    rank: int | None
    nnodes: int
    devices: tuple[str, ...]


class SnapshotHead(TypedDict):
    """A live run's answer to ``status`` but its rows."""

    ends_at: float | None
    invocation_id: str
    launcher: str
    started_at: float
    uptime: float
    state_dir: str
    stopping: bool
    containment: list[ContainmentLine]


class SnapshotJson(SnapshotHead):
    """A live run's answer to ``status`` (:class:`RunSnapshot`), as the channel carries it."""

    instances: list[InstanceStatusJson]


@dataclass(frozen=True)
class InstanceStatus:
    """Where one instance is planned, and where it is now: one row of ``status``."""

    instance: str
    unit: str
    type: UnitType
    node: str
    gpus: tuple[int, ...]
    port: int | None
    model: str | None  # lane replicas (rank 0) only
    state: InstanceState = InstanceState.INACTIVE
    since: float | None = None
    pid: int | None = None
    restarts: int = 0
    last_exit: ExitStatus | None = None
    reason: str | None = None
    probe: str | None = None  # the verdict: ok, none, pending, timed out (…), an answer
    ready_seconds: float | None = None
    attempt: int | None = None  # which attempt at becoming ready (while it starts)
    attempt_limit: int | None = None  # of how many (start_limit_burst)
    replica: str | None = None  # multi-node lane ranks: the replica (rank 0's instance)
    rank: int | None = None
    nnodes: int = 1
    devices: tuple[str, ...] = ()  # the GPUs as the lane sees them (empty: simulated)
    liveness_failures: int = 0  # liveness probes failed in a row (unresponsive lanes)
    served_names: tuple[str, ...] = ()  # lane replicas: every model name it answers to
    until: float | None = None  # waiting for its stagger turn: when it comes (Unix time)

    def with_record(self, record: InstanceRecord) -> InstanceStatus:
        """This row with the state ``record`` (the fold of its events) gives it."""
        return replace(
            self,
            state=record.state,
            since=record.since,
            pid=record.pid,
            restarts=record.restarts,
            last_exit=record.last_exit,
            reason=record.reason,
            probe=record.probe_verdict,
            ready_seconds=record.ready_seconds,
            attempt=record.attempt,
            attempt_limit=record.attempt_limit,
            liveness_failures=record.liveness_failures,
            until=record.until,
        )

    @property
    def attempt_text(self) -> str | None:
        """``2 of 5`` while the instance is (re)starting, or failed doing so; else None."""
        if self.attempt is None or self.state not in _ATTEMPTING:
            return None
        limit = f" of {self.attempt_limit}" if self.attempt_limit else ""
        return f"{self.attempt}{limit}"

    def to_json(self) -> InstanceStatusJson:
        return {
            "instance": self.instance,
            "unit": self.unit,
            "type": self.type.value,
            "node": self.node,
            "model": self.model,
            "served_names": list(self.served_names),
            "gpus": list(self.gpus),
            "port": self.port,
            "state": self.state.value,
            "since": self.since,
            "pid": self.pid,
            "restarts": self.restarts,
            "last_exit": None if self.last_exit is None else self.last_exit.to_json(),
            "reason": self.reason,
            "probe": self.probe,
            "ready_seconds": self.ready_seconds,
            "attempt": self.attempt,
            "attempt_limit": self.attempt_limit,
            "replica": self.replica,
            "rank": self.rank,
            "nnodes": self.nnodes,
            "devices": list(self.devices),
            "liveness_failures": self.liveness_failures,
            "until": self.until,
        }

    @cached_property
    def json_text(self) -> str:
        """:meth:`to_json` as compact JSON, worked out once per row: the live run keeps
        the rows that did not change between two ``status`` requests (:class:`StatusRows`),
        so its reply is mostly a join of these (``RunSnapshot.json_text``)."""
        return json.dumps(self.to_json(), separators=(",", ":"))

    @classmethod
    def from_json(cls, data: Mapping[str, Json]) -> InstanceStatus:
        """Read back :meth:`to_json`; ValueError (or KeyError, TypeError) when it is not one."""
        read = FieldReader(data)
        exit_json = data.get("last_exit")
        return cls(
            instance=read.text("instance"),
            unit=read.text("unit"),
            type=UnitType(read.text("type")),
            node=read.text("node"),
            gpus=read.integers("gpus"),
            port=read.optional_integer("port"),
            model=read.optional_text("model"),
            state=InstanceState(read.text("state")),
            since=read.optional_number("since"),
            pid=read.optional_integer("pid"),
            restarts=read.optional_integer("restarts") or 0,
            last_exit=None if exit_json is None else exit_from_json(exit_json),
            reason=read.optional_text("reason"),
            probe=read.optional_text("probe"),
            ready_seconds=read.optional_number("ready_seconds"),
            attempt=read.optional_integer("attempt"),
            attempt_limit=read.optional_integer("attempt_limit"),
            replica=read.optional_text("replica"),
            rank=read.optional_integer("rank"),
            nnodes=read.optional_integer("nnodes") or 1,
            devices=read.texts("devices"),
            liveness_failures=read.optional_integer("liveness_failures") or 0,
            served_names=read.texts("served_names"),
            until=read.optional_number("until"),
        )


def planned_facts(
    instance: str, rank: int | None, nnodes: int, gpus: Sequence[int], node_devices: Sequence[str]
) -> PlannedFacts:
    """The row fields that come from the plan: a rank's replica, the GPUs it sees."""
    return {
        "replica": instance.split(":", 1)[0] if nnodes > 1 else None,
        "rank": rank,
        "nnodes": nnodes,
        "devices": tuple(node_devices[g] for g in gpus if g < len(node_devices)),
    }


@dataclass(frozen=True)
class RunSnapshot:
    """What a live run answers to ``status``: its instances, how long it has been up, and
    each supervisor's latest report on its no-orphan layers (so that ``status`` of a live
    run need not read its ``events.jsonl``: ~3,000 lines at 1,024 lanes)."""

    invocation_id: str
    launcher: str
    started_at: float
    uptime: float
    state_dir: str
    stopping: bool
    instances: tuple[InstanceStatus, ...]
    containment: tuple[Contained, ...] = ()
    ends_at: float | None = None  # the Slurm job's end time (its time limit), when known

    def to_json(self) -> SnapshotJson:
        return {**self._head(), "instances": [i.to_json() for i in self.instances]}

    def json_text(self) -> str:
        """:meth:`to_json` as compact JSON, the rows joined from their own (cached) text:
        at thousands of lanes, encoding every row anew would cost the controller's loop."""
        head = json.dumps(self._head(), separators=(",", ":"))
        rows = ",".join(row.json_text for row in self.instances)
        return f'{head[:-1]},"instances":[{rows}]}}'

    def _head(self) -> SnapshotHead:
        """Everything but the rows."""
        return {
            "ends_at": self.ends_at,
            "invocation_id": self.invocation_id,
            "launcher": self.launcher,
            "started_at": self.started_at,
            "uptime": self.uptime,
            "state_dir": self.state_dir,
            "stopping": self.stopping,
            "containment": [c.to_json() for c in self.containment],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Json]) -> RunSnapshot:
        """Read back :meth:`to_json`; ValueError (or TypeError) when it is not one."""
        instances = data.get("instances")
        if not isinstance(instances, list):
            raise ValueError("a snapshot needs a list of instances")
        read = FieldReader(data)
        return cls(
            invocation_id=read.text("invocation_id"),
            launcher=read.text("launcher"),
            started_at=read.number("started_at"),
            uptime=read.number("uptime"),
            state_dir=read.text("state_dir"),
            stopping=data.get("stopping") is True,
            instances=tuple(InstanceStatus.from_json(_object(i)) for i in instances),
            containment=_contained(data.get("containment")),
            ends_at=read.optional_number("ends_at"),
        )


def _contained(data: object) -> tuple[Contained, ...]:
    """The ``containment`` reports of a snapshot (none from a controller that sends none)."""
    if not isinstance(data, list):
        return ()
    return tuple(e for e in map(parse_event, data) if isinstance(e, Contained))


def _object(value: Json) -> dict[str, Json]:
    if not isinstance(value, dict):
        raise ValueError("a status row is a JSON object")
    return value


class StatusRows:
    """One ``status`` row per planned instance, in plan order, for a live run that is asked
    again and again: the plan's facts of each row are worked out once, and a row is
    rebuilt only when its instance's record changed since the last ask (records are
    immutable and replaced on each event, so ``is`` tells), so a ``ddsup status`` of a
    large run does not rebuild every row on the controller's loop; ``model_of``: serving
    lanes."""

    def __init__(self, plan: Plan, model_of: Mapping[str, str]) -> None:
        self._planned: list[InstanceStatus] = []
        for p in plan.instances:
            model = model_of.get(p.instance)
            names = p.served_names if model else ()
            row = InstanceStatus(
                p.instance, p.unit, p.type, p.node, p.gpus, p.port, model, served_names=names
            )
            devices = plan.node(p.node).devices
            row = replace(row, **planned_facts(p.instance, p.rank, p.nnodes, p.gpus, devices))
            self._planned.append(row.with_record(InstanceRecord()))
        self._made: dict[str, tuple[InstanceRecord, InstanceStatus]] = {}
        self._waiting: dict[str, InstanceStatus] = {}

    def rows(
        self, records: Mapping[str, InstanceRecord], waiting: Mapping[str, str] | None = None
    ) -> tuple[InstanceStatus, ...]:
        """The rows as ``records`` (instance → the fold of its events) say now; an instance
        never heard of is ``inactive``, or ``waiting`` for what ``waiting`` says holds it."""
        out = []
        for planned in self._planned:
            record = records.get(planned.instance)
            if record is None:
                reason = waiting.get(planned.instance) if waiting else None
                out.append(planned if reason is None else self._waiting_row(planned, reason))
                continue
            made = self._made.get(planned.instance)
            if made is None or made[0] is not record:
                made = (record, planned.with_record(record))
                self._made[planned.instance] = made
            out.append(made[1])
        return tuple(out)

    def _waiting_row(self, planned: InstanceStatus, reason: str) -> InstanceStatus:
        row = self._waiting.get(planned.instance)
        if row is None or row.reason != reason:
            row = replace(planned, state=InstanceState.WAITING, reason=reason)
            self._waiting[planned.instance] = row
        return row


def status_rows(
    plan: Plan, model_of: Mapping[str, str], records: Mapping[str, InstanceRecord]
) -> tuple[InstanceStatus, ...]:
    """One ``status`` row per planned instance, in plan order (:class:`StatusRows`, once)."""
    return StatusRows(plan, model_of).rows(records)
