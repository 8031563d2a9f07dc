"""A run's status: one typed row per instance, and the live run's snapshot of them all.

The live controller answers ``status`` with a :class:`RunSnapshot`; ``ddsup status``
builds the same :class:`InstanceStatus` rows for a finished run from ``plan.json`` and
``events.jsonl``. ``InstanceStatus.to_json`` is the documented row of ``status --json``
(docs/operating.md), and ``from_json`` reads it back from the control channel.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ddsup._exit import ExitStatus
from ddsup.record._events import Contained, parse_event
from ddsup.record._instance import InstanceRecord
from ddsup.record._outcome import exit_from_json
from ddsup.record._states import InstanceState
from ddsup.units._model import UnitType


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
    probe: str | None = None  # the verdict: ok, none, pending, timed out (…)
    ready_seconds: float | None = None
    liveness_failures: int = 0  # liveness probes failed in a row (unresponsive lanes)
    served_names: tuple[str, ...] = ()  # lane replicas: every model name it answers to

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
            liveness_failures=record.liveness_failures,
        )

    def to_json(self) -> dict[str, Any]:
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
            "liveness_failures": self.liveness_failures,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> InstanceStatus:
        """Read back :meth:`to_json`; ValueError (or KeyError, TypeError) when it is not one."""
        exit_json = data.get("last_exit")
        return cls(
            instance=str(data["instance"]),
            unit=str(data["unit"]),
            type=UnitType(data["type"]),
            node=str(data["node"]),
            gpus=tuple(int(g) for g in data.get("gpus") or ()),
            port=_optional(data, "port", int),
            model=_optional(data, "model", str),
            state=InstanceState(data["state"]),
            since=_optional(data, "since", float),
            pid=_optional(data, "pid", int),
            restarts=int(data.get("restarts") or 0),
            last_exit=None if exit_json is None else exit_from_json(exit_json),
            reason=_optional(data, "reason", str),
            probe=_optional(data, "probe", str),
            ready_seconds=_optional(data, "ready_seconds", float),
            liveness_failures=int(data.get("liveness_failures") or 0),
            served_names=tuple(str(n) for n in data.get("served_names") or ()),
        )


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

    def to_json(self) -> dict[str, Any]:
        return {
            "ends_at": self.ends_at,
            "invocation_id": self.invocation_id,
            "launcher": self.launcher,
            "started_at": self.started_at,
            "uptime": self.uptime,
            "state_dir": self.state_dir,
            "stopping": self.stopping,
            "instances": [i.to_json() for i in self.instances],
            "containment": [c.to_json() for c in self.containment],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunSnapshot:
        instances = data.get("instances")
        if not isinstance(instances, list):
            raise ValueError("a snapshot needs a list of instances")
        return cls(
            invocation_id=str(data["invocation_id"]),
            launcher=str(data["launcher"]),
            started_at=float(data["started_at"]),
            uptime=float(data["uptime"]),
            state_dir=str(data["state_dir"]),
            stopping=data.get("stopping") is True,
            instances=tuple(InstanceStatus.from_json(i) for i in instances),
            containment=_contained(data.get("containment")),
            ends_at=_optional(data, "ends_at", float),
        )


def _contained(data: object) -> tuple[Contained, ...]:
    """The ``containment`` reports of a snapshot (none from a controller that sends none)."""
    if not isinstance(data, list):
        return ()
    return tuple(e for e in map(parse_event, data) if isinstance(e, Contained))


def _optional(data: Mapping[str, Any], key: str, kind: type[Any]) -> Any:
    value = data.get(key)
    if value is None:
        return None
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ValueError(f"{key!r} must be {kind.__name__} or null")
    return value
