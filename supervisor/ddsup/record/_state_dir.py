"""The state directory of a run: plan, events, logs, result, and how to reach the run.

Layout (dirs 0700, files 0600, so other users of a shared cluster read nothing)::

    plan.json        resolved placement (no secrets)
    run.json         invocation id, pid, launcher, control address (no secret)
    control.secret   the per-run secret of the control channel
    events.jsonl     every state change, one JSON object a line
    logs/<instance>.log
    result.json      status, exit_code, cause — written on every exit path
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddsup._errors import RunStateError
from ddsup.record._outcome import Outcome


@dataclass(frozen=True)
class ControlAddress:
    """Where a live run's control channel listens (the secret is in ``control.secret``)."""

    host: str
    port: int


@dataclass(frozen=True)
class RunInfo:
    """``run.json``: how to find and recognise the run (no secret)."""

    invocation_id: str
    pid: int | None = None
    launcher: str | None = None
    unit_dir: str | None = None
    started_at: float | None = None
    control: ControlAddress | None = None
    containment: Mapping[str, Any] | None = None  # ddsup start's no-orphan layers

    def to_json(self) -> dict[str, Any]:
        control = self.control
        return {
            "containment": None if self.containment is None else dict(self.containment),
            "invocation_id": self.invocation_id,
            "pid": self.pid,
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
        return cls(
            invocation_id=data["invocation_id"],
            pid=data["pid"] if isinstance(data.get("pid"), int) else None,
            launcher=data["launcher"] if isinstance(data.get("launcher"), str) else None,
            unit_dir=data["unit_dir"] if isinstance(data.get("unit_dir"), str) else None,
            started_at=float(started) if isinstance(started, (int, float)) else None,
            control=address,
            containment=data["containment"]
            if isinstance(data.get("containment"), Mapping)
            else None,
        )


@dataclass(frozen=True)
class StateDir:
    """Paths inside one run's state directory."""

    path: Path

    @property
    def plan(self) -> Path:
        return self.path / "plan.json"

    @property
    def run(self) -> Path:
        return self.path / "run.json"

    @property
    def secret(self) -> Path:
        return self.path / "control.secret"

    @property
    def events(self) -> Path:
        return self.path / "events.jsonl"

    @property
    def logs(self) -> Path:
        return self.path / "logs"

    @property
    def result(self) -> Path:
        return self.path / "result.json"

    def log(self, instance: str) -> Path:
        return self.logs / f"{instance}.log"

    def create(self) -> None:
        self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.path.chmod(0o700)
        self.logs.mkdir(mode=0o700, exist_ok=True)

    def write_json(self, path: Path, data: Any) -> None:
        """Write atomically (temp file + rename), mode 0600."""
        write_private(path, json.dumps(data, indent=2, sort_keys=True) + "\n")

    def read_run(self) -> RunInfo:
        """``run.json``; RunStateError when it is missing or not one."""
        try:
            return RunInfo.from_json(self.read_json(self.run))
        except (KeyError, TypeError, ValueError) as err:
            raise RunStateError(f"cannot read {self.run}: {err}") from err

    def read_result(self) -> Outcome | None:
        """``result.json`` once the run has finished, else None."""
        if not self.result.exists():
            return None
        try:
            return Outcome.from_dict(self.read_json(self.result))
        except (AttributeError, TypeError, ValueError) as err:
            raise RunStateError(f"cannot read {self.result}: {err}") from err

    def read_json(self, path: Path) -> Any:
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError as err:
            raise RunStateError(f"{path} does not exist: is this a ddsup state directory?") from err
        except (OSError, ValueError) as err:
            raise RunStateError(f"cannot read {path}: {err}") from err


def write_private(path: Path, text: str) -> None:
    """Atomically replace ``path`` with ``text``, readable by the owner only."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)


def default_state_dir(base: Path | None = None) -> Path:
    """``./ddsup-<job id>`` inside Slurm, else ``./ddsup-<timestamp>`` (made unique)."""
    base = base or Path.cwd()
    job = os.environ.get("SLURM_JOB_ID")
    stem = f"ddsup-{job}" if job else "ddsup-" + time.strftime("%Y%m%d-%H%M%S")
    candidate = base / stem
    suffix = 1
    while candidate.exists():
        suffix += 1
        candidate = base / f"{stem}.{suffix}"
    return candidate


def newest_state_dir(base: Path | None = None) -> StateDir:
    """The newest run in ``base`` (default: the current directory), for status/stop/logs."""
    base = base or Path.cwd()
    runs = [p for p in base.glob("ddsup-*") if (p / "run.json").is_file()]
    if not runs:
        raise RunStateError(
            f"no ddsup run found in {base} (looked for ddsup-*/run.json); pass --state-dir"
        )
    return StateDir(max(runs, key=lambda p: (p / "run.json").stat().st_mtime))
