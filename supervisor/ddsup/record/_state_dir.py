"""The state directory of a run: plan, events, logs, result, and how to reach the run.

Layout (dirs 0700, files 0600, so other users of a shared cluster read nothing)::

    plan.json        resolved placement (no secrets)
    run.json         invocation id, pid, launcher, control address (no secret)
    control.secret   the per-run secret of the control channel
    events.jsonl     every state change, one JSON object a line
    logs/<instance>.log
    result.json      status, exit_code, cause — written on every exit path

``ddsup start`` creates the directory (``mkdir``: it fails if something is there) or,
for ``--state-dir`` naming an existing one, uses it only when the caller owns it,
nobody else may write to it and it is not a symlink (:class:`StateDirError`, exit 73).
Writes go through ``_private``; readers that act on what the files say check them first
(``ops._run_handle``).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ddsup.record as record  # record.Outcome: read_result's, imported when first used
from ddsup._errors import RunStateError, StateDirError
from ddsup.record._faults import WriteFaults
from ddsup.record._private import check_private, write_private
from ddsup.units import printable

if TYPE_CHECKING:  # a node agent never reads a result: it need not create the outcomes
    from ddsup.record._outcome import Outcome

__all__ = ["ControlAddress", "RunInfo", "StateDir", "create_state_dir", "write_private"]


@dataclass(frozen=True)
class ControlAddress:
    """Where a live run's control channel listens (the secret is in ``control.secret``)."""

    host: str
    port: int

    def __str__(self) -> str:
        """``host:port`` (``[host]:port`` for IPv6), as ``connect_channel`` takes it."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


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
    containment: Mapping[str, Any] | None = None  # ddsup start's no-orphan layers

    def to_json(self) -> dict[str, Any]:
        control = self.control
        return {
            "containment": None if self.containment is None else dict(self.containment),
            "invocation_id": self.invocation_id,
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
        host, pid_start = data.get("host"), data.get("pid_start")
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
        )


WORKERS_FILE = "endpoint-workers.json"  # the endpoint's processes, while it serves (status)


@dataclass(frozen=True)
class StateDir:
    """Paths inside one run's state directory; ``faults`` collects failed writes there."""

    path: Path
    faults: WriteFaults = field(default_factory=WriteFaults, compare=False, repr=False)

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

    @property
    def endpoint_workers(self) -> Path:
        return self.path / WORKERS_FILE

    def log(self, instance: str) -> Path:
        return self.logs / f"{instance}.log"

    def create(self, *, exclusive: bool = False) -> None:
        """Make the directory and ``logs/`` (0700), or check that an existing one is safe.

        ``exclusive``: FileExistsError when it exists (a default name: pick another).
        StateDirError when it cannot be made or is not safe; a ``logs/`` that cannot be
        made is a write fault (the units' output then goes nowhere, the run goes on).
        """
        name = printable(str(self.path))
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            os.mkdir(self.path, 0o700)
        except FileExistsError:
            if exclusive:
                raise
        except OSError as err:
            raise StateDirError(
                f"cannot create the state directory {name}: {err.strerror}"
            ) from err
        for directory in (self.path, self.logs):
            try:
                os.mkdir(directory, 0o700)
            except FileExistsError:
                pass
            except OSError as err:
                self.faults.failed(directory, err)
                continue
            check_private(directory, directory=True, error=StateDirError, hint=_HINT)
            _owner_only(directory)

    def write_json(self, path: Path, data: Any) -> None:
        """Write atomically (temp file + rename), mode 0600; OSError when it cannot."""
        write_private(path, json.dumps(data, indent=2, sort_keys=True) + "\n")

    def save(self, path: Path, text: str) -> bool:
        """Write one of the run's files; False after a write fault (never an error)."""
        try:
            write_private(path, text)
        except OSError as err:
            self.faults.failed(path, err)
            return False
        return True

    def save_json(self, path: Path, data: Any) -> bool:
        return self.save(path, json.dumps(data, indent=2, sort_keys=True) + "\n")

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
            return record.Outcome.from_dict(self.read_json(self.result))
        except (AttributeError, TypeError, ValueError) as err:
            raise RunStateError(f"cannot read {self.result}: {err}") from err

    def read_json(self, path: Path) -> Any:
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError as err:
            raise RunStateError(f"{path} does not exist: is this a ddsup state directory?") from err
        except (OSError, ValueError) as err:
            raise RunStateError(f"cannot read {path}: {err}") from err


_HINT = (
    "ddsup start uses an existing state directory only when it is yours, not writable by "
    "others and not a symlink; pass --state-dir a new path"
)


def _owner_only(directory: Path) -> None:
    """Mode 0700, through a descriptor that did not follow a symlink (best effort)."""
    with contextlib.suppress(OSError):  # a read-only file system: nothing is written there
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            os.fchmod(fd, 0o700)
        finally:
            os.close(fd)


def for_attempt(path: Path, attempt: int) -> Path:
    """The state dir of a requeued job's ``attempt``: the first one's, ``.attempt<N>`` added.

    Each attempt keeps its own record (plan, events, logs, result) beside the others
    instead of overwriting them: ``run-42``, ``run-42.attempt1``, ``run-42.attempt2``.
    """
    return path if attempt == 0 else path.with_name(f"{path.name}.attempt{attempt}")


def create_state_dir(path: Path | None, attempt: int = 0) -> StateDir:
    """The run's state directory, created (or checked, when ``path`` exists) for ``start``.

    ``path`` is made absolute without resolving symlinks: a symlink given as the state
    directory is refused, not followed. Without ``path``: ``./ddsup-<job id>`` inside
    Slurm, else ``./ddsup-<timestamp>``, with ``.2``, ``.3`` … when taken; a requeued
    job's attempt N adds ``.attempt<N>`` (:func:`for_attempt`).
    """
    if path is not None:
        state = StateDir(for_attempt(Path(os.path.abspath(path)), attempt))
        state.create()
        return state
    for candidate in _default_names(Path.cwd(), attempt):
        state = StateDir(candidate)
        with contextlib.suppress(FileExistsError):
            state.create(exclusive=True)
            return state
    raise StateDirError(f"no free ddsup-* name in {printable(str(Path.cwd()))}: pass --state-dir")


def _default_names(base: Path, attempt: int, tries: int = 1000) -> Iterator[Path]:
    job = os.environ.get("SLURM_JOB_ID")
    stem = f"ddsup-{job}" if job else "ddsup-" + time.strftime("%Y%m%d-%H%M%S")
    stem = for_attempt(Path(stem), attempt).name
    yield base / stem
    for suffix in range(2, tries):
        yield base / f"{stem}.{suffix}"


def run_dirs(base: Path) -> list[Path]:
    """The caller's runs in ``base``: ``ddsup-*`` directories with a ``run.json``, both
    private to the caller (``check_private``: not another user's, not a symlink)."""
    return [path for _, path in sorted((when, path) for path, when in _private_runs(base))]


def _private_runs(base: Path) -> Iterator[tuple[Path, float]]:
    """Each of the caller's runs in ``base`` and the time its ``run.json`` last changed."""
    for path in sorted(base.glob("ddsup-*")):
        try:
            check_private(path, directory=True, error=StateDirError)
            status = check_private(path / "run.json", directory=False, error=StateDirError)
        except (OSError, StateDirError):
            continue
        yield path, status.st_mtime


def newest_state_dir(base: Path | None = None) -> StateDir:
    """The caller's newest run in ``base`` (default: the current directory).

    For status/stop/logs. A ``ddsup-*`` that is not the caller's, or whose ``run.json``
    is not (another user's, a symlink), is not one of the caller's runs: it is skipped,
    so nobody can plant a newer "run" in a shared directory.
    """
    base = base or Path.cwd()
    runs = [(when, path) for path, when in _private_runs(base)]
    if not runs:
        raise RunStateError(
            f"no ddsup run of yours found in {printable(str(base))} (looked for "
            "ddsup-*/run.json); pass --state-dir"
        )
    return StateDir(max(runs)[1])
