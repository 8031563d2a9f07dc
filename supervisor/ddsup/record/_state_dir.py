"""The state directory of a run: plan, events, logs, result, and how to reach the run.

Layout (dirs 0700, files 0600, so other users of a shared cluster read nothing)::

    plan.json        resolved placement (no secrets)
    run.json         invocation id, pid, launcher, control address (no secret)
    control.secret   the per-run secret of the control channel
    events.jsonl     every state change, one JSON object a line
    logs/<instance>.log
    result.json      status, exit_code, cause — written on every exit path
    attempts/<N>/    the record of each earlier attempt of the job (``_attempts``)

``ddsup start`` creates the directory (``mkdir``: it fails if something is there) or,
for ``--state-dir`` naming an existing one, uses it only when the caller owns it,
nobody else may write to it and it is not a symlink (:class:`StateDirError`, exit 73).
Writes go through ``_private``; readers that act on what the files say check them first
(``ops._run_handle``).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ddsup.record as record  # record.Outcome: read_result's, imported when first used
from ddsup._errors import RunStateError, StateDirError
from ddsup.process import FileAt, LogFile
from ddsup.record._faults import WriteFaults
from ddsup.record._private import (
    DIRECTORY_FLAGS,
    HeldDir,
    check_private,
    open_append,
    open_parent,
    open_private_dir,
    write_private,
)
from ddsup.record._run_info import ControlAddress as ControlAddress
from ddsup.record._run_info import RunInfo as RunInfo
from ddsup.units import printable

if TYPE_CHECKING:  # a node agent never reads a result: it need not create the outcomes
    from ddsup.record._outcome import Outcome

__all__ = [
    "ControlAddress",
    "RunInfo",
    "StateDir",
    "create_state_dir",
    "hold_state_dir",
    "open_state_dir",
    "state_dir_in",
    "write_private",
]


WORKERS_FILE = "endpoint-workers.json"  # the endpoint's processes, while it serves (status)
RESERVE = ".space-for-result"
"""Space kept from the start for ``result.json``, given back when the run ends: on a disk
that fills up meanwhile, removing it makes room for the result (``controller._run_record``)."""
RESERVE_BYTES = 64 << 10  # random, so that no compressing file system makes it smaller


@dataclass(frozen=True)
class StateDir:
    """Paths inside one run's state directory; ``faults`` collects failed writes there.

    The run's own writers (``ddsup start``, each node agent) hold the directory and its
    ``logs/`` open (``held``, ``held_logs``: :func:`create_state_dir`,
    :func:`open_state_dir`) and write through them, never through ``path``, which then
    only names things in messages and for other processes. ``refused`` (an agent whose
    state directory failed its checks) makes every write a fault. Readers (``status``,
    ``logs``, tests) hold nothing and use ``path``.
    """

    path: Path
    faults: WriteFaults = field(default_factory=WriteFaults, compare=False, repr=False)
    held: HeldDir | None = field(default=None, compare=False, repr=False)
    held_logs: HeldDir | None = field(default=None, compare=False, repr=False)
    refused: OSError | None = field(default=None, compare=False, repr=False)

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

    def log_file(self, instance: str) -> LogFile:
        """Where to write ``instance``'s log: in the held ``logs/`` when there is one."""
        if self.held_logs is not None:
            return FileAt(self.held_logs.fd, f"{instance}.log", str(self.log(instance)))
        if self.held is not None or self.refused is not None:
            # no logs/ to write in (a fault already said why): opening fails (EBADF), and
            # the unit's output goes to /dev/null, never to a path
            return FileAt(-1, f"{instance}.log", str(self.log(instance)))
        return self.log(instance)

    def _where(self, path: Path) -> tuple[HeldDir | None, str]:
        """The held directory that ``path`` (one of this run's files) is written through,
        and its name there; (None, the path) when nothing is held."""
        if self.held is None:
            return None, str(path)
        relative = path.relative_to(self.path)
        if relative.parent == Path("logs") and self.held_logs is not None:
            return self.held_logs, relative.name
        return self.held, str(relative)

    def write_json(self, path: Path, data: Any) -> None:
        """Write atomically (temp file + rename), mode 0600; OSError when it cannot."""
        self._write(path, json.dumps(data, indent=2, sort_keys=True) + "\n")

    def _write(self, path: Path, text: str) -> None:
        if self.refused is not None:
            raise self.refused
        held, name = self._where(path)
        if held is None:
            write_private(path, text)
        else:
            held.write(name, text)

    def append(self, path: Path) -> int:
        """A descriptor appending to one of the run's files; OSError when it cannot."""
        if self.refused is not None:
            raise self.refused
        held, name = self._where(path)
        return open_append(path) if held is None else held.append(name)

    def save(self, path: Path, text: str) -> bool:
        """Write one of the run's files; False after a write fault (never an error)."""
        try:
            self._write(path, text)
        except OSError as err:
            self.faults.failed(path, err)
            return False
        return True

    def save_json(self, path: Path, data: Any) -> bool:
        return self.save(path, json.dumps(data, indent=2, sort_keys=True) + "\n")

    def release_reserve(self) -> bool:
        """Give back the space kept for the result (:data:`RESERVE`); whether there was any."""
        try:
            if self.held is None:
                (self.path / RESERVE).unlink()
            else:
                os.unlink(RESERVE, dir_fd=self.held.fd)
        except OSError:
            return False
        return True

    def open_records(self) -> int | str:
        """The ``containment`` directory for ``process.end_on_this_node``: a descriptor
        opened through the held directory (the caller closes it), else its path."""
        if self.held is None:
            return str(self.path / "containment")
        return os.open("containment", DIRECTORY_FLAGS, dir_fd=self.held.fd)

    def close(self) -> None:
        """Let go of the held directories (the run's writes are over)."""
        for held in (self.held_logs, self.held):
            if held is not None:
                held.close()

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
_PARENT_HINT = (
    "pass --state-dir a path in a directory that only you (or root) may write, or in a "
    "sticky one such as /tmp"
)


def _hold(path: Path, *, exclusive: bool) -> HeldDir:
    """Make ``path`` (0700), or check that an existing one is safe, and hold it.

    ``exclusive``: FileExistsError when it exists (a default name: pick another).
    StateDirError when it cannot be made or is not safe, or its parent lets another user
    replace it.
    """
    name = printable(str(path))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        parent = open_parent(path, error=StateDirError, hint=_PARENT_HINT)
    except OSError as err:
        raise StateDirError(f"cannot create the state directory {name}: {err.strerror}") from err
    try:
        held = _make_and_hold(path, parent, exclusive=exclusive)
    finally:
        os.close(parent)
    _owner_only(held)
    return held


def state_dir_in(held: HeldDir) -> StateDir:
    """The run's :class:`StateDir` in the held directory: the space for the result kept,
    ``logs/`` made (0700) or checked, and held too.

    StateDirError when ``logs/`` is not safe; one that cannot be made is a write fault
    (the units' output then goes nowhere, the run goes on).
    """
    state = StateDir(held.path, held=held)
    _reserve(held)
    try:
        logs = held.subdirectory("logs", error=StateDirError, hint=_HINT)
    except OSError as err:
        state.faults.failed(state.logs, err)
        return state
    _owner_only(logs)
    return replace(state, held_logs=logs)


def _make_and_hold(path: Path, parent: int, *, exclusive: bool) -> HeldDir:
    """``mkdir`` and ``open`` of ``path`` in its parent's descriptor, no name between."""
    try:
        os.mkdir(path.name, 0o700, dir_fd=parent)
    except FileExistsError:
        if exclusive:
            raise
    except OSError as err:
        raise StateDirError(
            f"cannot create the state directory {printable(str(path))}: {err.strerror}"
        ) from err
    try:
        return open_private_dir(path.name, path, dir_fd=parent, error=StateDirError, hint=_HINT)
    except OSError as err:
        raise StateDirError(
            f"cannot open the state directory {printable(str(path))}: {err.strerror}"
        ) from err


def _reserve(held: HeldDir) -> None:
    """Keep :data:`RESERVE_BYTES` for the result, or as much of it as the disk has (best
    effort: a disk full already, or read-only, keeps nothing, and says so once its first
    real write fails)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(RESERVE, flags, 0o600, dir_fd=held.fd)
    except OSError:
        return
    kept = 0
    try:
        while kept < RESERVE_BYTES:  # 4 KiB at a time: a nearly full disk keeps what it has
            kept += os.write(fd, os.urandom(min(4096, RESERVE_BYTES - kept)))
    except OSError:
        if kept == 0:
            held.unlink(RESERVE)
    finally:
        os.close(fd)


def _owner_only(held: HeldDir) -> None:
    """Mode 0700 (best effort: on a read-only file system nothing is written there)."""
    with contextlib.suppress(OSError):
        os.fchmod(held.fd, 0o700)


def open_state_dir(path: Path) -> StateDir:
    """An existing state directory held for writing (a node agent's: ``ddsup start`` made
    it): when it is not a private directory of the caller's, every write to it is a fault,
    reported once, and the run goes on."""
    try:
        held = open_private_dir(path, path, error=StateDirError, hint=_HINT)
    except (OSError, StateDirError) as err:
        refused = err if isinstance(err, OSError) else PermissionError(errno.EPERM, str(err))
        state = StateDir(path, refused=refused)
        state.faults.failed(path, refused)
        return state
    try:
        logs = held.subdirectory("logs", error=StateDirError, hint=_HINT)
    except (OSError, StateDirError) as err:
        state = StateDir(path, held=held)
        failed = err if isinstance(err, OSError) else PermissionError(errno.EPERM, str(err))
        state.faults.failed(state.logs, failed)
        return state
    return StateDir(path, held=held, held_logs=logs)


def create_state_dir(path: Path | None, *, requeued: bool = False) -> StateDir:
    """:func:`hold_state_dir`, then :func:`state_dir_in`, no earlier attempt moved aside."""
    return state_dir_in(hold_state_dir(path, requeued=requeued))


def hold_state_dir(path: Path | None, *, requeued: bool = False) -> HeldDir:
    """The run's state directory, created (or checked, when ``path`` exists) and held,
    nothing written in it yet (``_attempts`` moves the previous attempt's record aside
    first); :func:`state_dir_in` makes it the run's.

    ``path`` is made absolute without resolving symlinks: a symlink given as the state
    directory is refused, not followed; its parent must not let another user replace it.
    Without ``path``: ``./ddsup-<job id>`` inside Slurm, else ``./ddsup-<timestamp>``,
    with ``.2``, ``.3`` … when taken; a ``requeued`` job's attempt goes on in
    ``./ddsup-<job id>`` when it is there (``_attempts``: each attempt of a job in one
    directory).
    """
    if path is not None:
        return _hold(Path(os.path.abspath(path)), exclusive=False)
    for n, candidate in enumerate(_default_names(Path.cwd())):
        with contextlib.suppress(FileExistsError):
            return _hold(candidate, exclusive=not (requeued and n == 0))
    raise StateDirError(f"no free ddsup-* name in {printable(str(Path.cwd()))}: pass --state-dir")


def _default_names(base: Path, tries: int = 1000) -> Iterator[Path]:
    job = os.environ.get("SLURM_JOB_ID")
    stem = f"ddsup-{job}" if job else "ddsup-" + time.strftime("%Y%m%d-%H%M%S")
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
