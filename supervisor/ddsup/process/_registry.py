"""The registry: (PID, start time) of every process of a run that a supervisor has seen.

A process that retitled itself (``setproctitle`` overwrites ``/proc/PID/environ``) or
cleared its environment carries no ``DDSUP_INVOCATION_ID``; if it also left its process
group and lost its parent, only its PID is left to find it by, and a PID alone may name
another process by then. So every supervisor writes what it has seen of its units' trees
to ``<state dir>/containment/<supervisor>.pids``, one ``PID START_TIME UNIT`` line each,
as the run goes. The sentinel and ``ddsup cleanup`` end exactly those processes: a PID
whose start time differs is a newcomer and is never touched, and the check and the kill
go through one pidfd, so the PID cannot change hands in between.

Next to each ``.pids`` file, ``<supervisor>.json`` says which machine wrote it (boot id
and PID namespace: the PIDs mean nothing anywhere else) and which no-orphan layers that
supervisor has (its cgroup among them), for the sentinel, ``ddsup cleanup`` and status.

Who may act on these files decides what they may name, so they are read and written
through a descriptor of the ``containment`` directory held since it was made
(:func:`records_directory`: the supervisor's own, private to its user), never through a
path someone could point elsewhere: a directory swapped in at the state directory's
path, with a ``.pids`` line naming an unrelated process, is never read.

Standard library only: the sentinel (``python -I -S``) imports this module.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import select
import signal
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

if __package__:
    from ddsup.process import _proc
else:  # imported by the sentinel program, which put this folder on sys.path
    import _proc  # type: ignore[import-not-found,no-redef,unused-ignore]

DIRECTORY = "containment"


@dataclass(frozen=True)
class Machine:
    """Where PIDs and start times mean something: one kernel boot, one PID namespace."""

    boot_id: str
    pid_namespace: str
    host: str

    @classmethod
    def here(cls) -> Machine:
        return cls(_proc.boot_id(), _proc.pid_namespace(), socket.gethostname())

    def to_json(self) -> dict[str, str]:
        return {"boot_id": self.boot_id, "pid_namespace": self.pid_namespace, "host": self.host}

    def matches(self, data: object) -> bool:
        """Whether a recorded machine (``to_json``) is this one."""
        return (
            isinstance(data, dict)
            and bool(self.boot_id)
            and data.get("boot_id") == self.boot_id
            and data.get("pid_namespace") == self.pid_namespace
        )


@dataclass(frozen=True)
class Entry:
    """A process seen: its PID, its start time (clock ticks after boot) and its unit."""

    pid: int
    start_time: int
    unit: str

    def line(self) -> str:
        return f"{self.pid} {self.start_time} {self.unit}\n"


Directory = int | str
"""A directory of records: a descriptor held open (what supervisors, the sentinel and
``ddsup cleanup`` use), or a path (tests, tools)."""

_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _open_in(directory: Directory, name: str, flags: int, mode: int = 0o600) -> int:
    """``name`` in ``directory``, never through a symlink."""
    if isinstance(directory, int):
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=directory)
    return os.open(os.path.join(directory, name), flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)


def private_directory(fd: int, shown: str) -> int:
    """``fd`` when its directory is the caller's and nobody else may write it; else it is
    closed and PermissionError says why."""
    status = os.fstat(fd)
    if status.st_uid == os.geteuid() and not status.st_mode & 0o022:
        return fd
    os.close(fd)
    raise PermissionError(
        errno.EPERM,
        f"{shown} is not private (uid {status.st_uid}, mode {status.st_mode & 0o7777:o})",
    )


def records_directory(state_dir: Directory, *, make: bool = True) -> int:
    """A descriptor of the ``containment`` directory in ``state_dir`` (a held descriptor of
    it, or its path, opened here without following a symlink), checked private; with
    ``make``, both made (0700) when missing. OSError when it cannot be (FileNotFoundError:
    there is none)."""
    if isinstance(state_dir, int):
        parent, shown = state_dir, DIRECTORY
    else:
        if make:
            os.makedirs(state_dir, 0o700, exist_ok=True)
        parent = private_directory(os.open(state_dir, _DIRECTORY_FLAGS), state_dir)
        shown = os.path.join(state_dir, DIRECTORY)
    try:
        if make:
            with contextlib.suppress(FileExistsError):
                os.mkdir(DIRECTORY, 0o700, dir_fd=parent)
        return private_directory(os.open(DIRECTORY, _DIRECTORY_FLAGS, dir_fd=parent), shown)
    finally:
        if parent is not state_dir:
            os.close(parent)


class RegistryFile:
    """The append-only ``.pids`` file of one supervisor (owner-only, never a symlink);
    ``path`` is where it is, for messages and status."""

    def __init__(self, directory: Directory, name: str, path: str) -> None:
        self.path = path
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        self._fd: int | None = _open_in(directory, f"{name}.pids", flags)

    def add(self, entries: Iterable[Entry]) -> None:
        """Append entries in one write (a reader never sees half a line of a batch)."""
        data = "".join(entry.line() for entry in entries).encode()
        if data and self._fd is not None:
            os.write(self._fd, data)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def read_entries(directory: Directory, name: str) -> list[Entry]:
    """The entries of supervisor ``name``'s ``.pids`` file in ``directory``; malformed
    lines (a torn write) are skipped."""
    try:
        with os.fdopen(_open_in(directory, f"{name}.pids", os.O_RDONLY)) as handle:
            lines = handle.read().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        fields = line.split(" ", 2)
        if len(fields) == 3 and fields[0].isdigit() and fields[1].isdigit():
            found.append(Entry(int(fields[0]), int(fields[1]), fields[2]))
    return found


def write_layers(directory: Directory, name: str, data: dict[str, Any]) -> None:
    """Write ``<name>.json`` into ``directory`` atomically, owner-only."""
    tmp = f".{name}.json.{os.getpid()}.tmp"
    fd = _open_in(directory, tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    with os.fdopen(fd, "w") as handle:
        handle.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
    if isinstance(directory, int):
        os.replace(tmp, f"{name}.json", src_dir_fd=directory, dst_dir_fd=directory)
    else:
        os.replace(os.path.join(directory, tmp), os.path.join(directory, f"{name}.json"))


def supervisors_here(directory: Directory, machine: Machine) -> list[tuple[str, dict[str, Any]]]:
    """(name, layers) of every supervisor that wrote into ``directory`` on this machine."""
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return []
    found = []
    for file_name in names:
        if not file_name.endswith(".json") or file_name.startswith("."):
            continue
        name = file_name[: -len(".json")]
        data = supervisor_here(directory, name, machine)
        if data is not None:
            found.append((name, data))
    return found


def supervisor_here(directory: Directory, name: str, machine: Machine) -> dict[str, Any] | None:
    """The layers supervisor ``name`` wrote into ``directory`` on this machine; None when
    it wrote none (or on another machine). One file: a local agent looking for the
    controller's reads that one, not every agent's (128 agents read 128 files each)."""
    if not name or os.sep in name or name.startswith("."):
        return None  # a name, not a path
    try:
        with os.fdopen(_open_in(directory, f"{name}.json", os.O_RDONLY)) as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and machine.matches(data.get("machine")) else None


# --- ending what was seen ---------------------------------------------------------------


def pin(entry: Entry) -> int | None:
    """A pidfd on ``entry``'s process if it is still that process (same start time) and
    alive; None otherwise. Through the pidfd, a later kill cannot hit a reused PID."""
    try:
        fd = os.pidfd_open(entry.pid)
    except OSError:
        return None
    if _proc.start_time(entry.pid) != entry.start_time:  # read after pinning: no race
        os.close(fd)
        return None
    return fd


def kill_pinned(fds: Iterable[int]) -> None:
    for fd in fds:
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(fd, signal.SIGKILL)


def kill_entries(
    entries: Iterable[Entry], *, exclude: Iterable[int] = ()
) -> list[tuple[Entry, int]]:
    """SIGKILL the processes of ``entries`` that are still those processes; each one hit
    with its pidfd (the caller waits on and closes them)."""
    skip = {os.getpid(), *exclude}
    pinned = []
    for entry in entries:
        fd = pin(entry) if entry.pid not in skip else None
        if fd is not None:
            pinned.append((entry, fd))
    kill_pinned(fd for _entry, fd in pinned)
    return pinned


def wait_pidfds(fds: list[int], timeout: float) -> bool:
    """Block until every pidfd's process has ended (a pidfd turns readable), or timeout;
    closes the fds. True when all ended."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    pending = set(fds)
    deadline = time.monotonic() + timeout
    try:
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            for fd, _event in poller.poll(left * 1000):
                pending.discard(fd)
                poller.unregister(fd)
        return True
    finally:
        for fd in fds:
            os.close(fd)
