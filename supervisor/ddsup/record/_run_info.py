"""``run.json``: how to find a run and recognise it (its id, its ``ddsup start``, where
its control channel listens); never a secret.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypedDict

from ddsup._json import Json


@dataclass(frozen=True)
class ControlAddress:
    """Where a live run's control channel listens (the secret is in ``control.secret``)."""

    host: str
    port: int

    def __str__(self) -> str:
        """``host:port`` (``[host]:port`` for IPv6), as ``connect_channel`` takes it."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


class ControlJson(TypedDict):
    host: str
    port: int


class RunInfoJson(TypedDict):
    """``run.json`` (:class:`RunInfo`; docs/operating.md)."""

    containment: dict[str, Json] | None
    invocation_id: str
    job: str | None
    uid: int | None
    attempt: int
    pid: int | None
    host: str | None
    pid_start: int | None
    launcher: str | None
    unit_dir: str | None
    started_at: float | None
    control: ControlJson | None


@dataclass(frozen=True)
class RunInfo:
    """``run.json``: how to find and recognise the run (no secret)."""

    invocation_id: str
    pid: int | None = None
    launcher: str | None = None
    unit_dir: str | None = None
    started_at: float | None = None
    control: ControlAddress | None = None
    host: str | None = None  # where ``pid`` runs (its hostname)
    pid_start: int | None = None  # its start time (clock ticks after boot): its identity
    containment: Mapping[str, Json] | None = None  # ddsup start's no-orphan layers
    job: str | None = None  # the Slurm job it ran in (``SLURM_JOB_ID``): the epilog's check
    uid: int | None = None  # the user it ran as (the file's owner must be the same)
    attempt: int = 0  # the job's attempt in this directory (``_attempts``)

    def to_json(self) -> RunInfoJson:
        control = self.control
        return {
            "containment": None if self.containment is None else dict(self.containment),
            "invocation_id": self.invocation_id,
            "job": self.job,
            "uid": self.uid,
            "attempt": self.attempt,
            "pid": self.pid,
            "host": self.host,
            "pid_start": self.pid_start,
            "launcher": self.launcher,
            "unit_dir": self.unit_dir,
            "started_at": self.started_at,
            "control": None if control is None else {"host": control.host, "port": control.port},
        }

    @classmethod
    def from_json(cls, data: object) -> RunInfo:
        """Read back :meth:`to_json` (other tools' partial files too); ValueError when not one."""
        if not isinstance(data, Mapping) or not isinstance(data.get("invocation_id"), str):
            raise ValueError("no key 'invocation_id' (a string)")
        control = data.get("control")
        address = None
        if isinstance(control, Mapping):
            address = ControlAddress(str(control["host"]), int(control["port"]))
        started = data.get("started_at")
        host, pid_start, job, uid, attempt = (
            data.get(k) for k in ("host", "pid_start", "job", "uid", "attempt")
        )
        return cls(
            invocation_id=data["invocation_id"],
            pid=data["pid"] if isinstance(data.get("pid"), int) else None,
            launcher=data["launcher"] if isinstance(data.get("launcher"), str) else None,
            unit_dir=data["unit_dir"] if isinstance(data.get("unit_dir"), str) else None,
            started_at=float(started) if isinstance(started, (int, float)) else None,
            control=address,
            host=host if isinstance(host, str) else None,
            pid_start=pid_start if isinstance(pid_start, int) else None,
            containment=data["containment"]
            if isinstance(data.get("containment"), Mapping)
            else None,
            job=job if isinstance(job, str) else None,
            uid=uid if isinstance(uid, int) and not isinstance(uid, bool) else None,
            attempt=attempt if isinstance(attempt, int) and not isinstance(attempt, bool) else 0,
        )
