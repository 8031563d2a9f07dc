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

Standard library only: the sentinel (``python -I -S``) imports this module.
"""

from __future__ import annotations

import contextlib
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


class RegistryFile:
    """The append-only ``.pids`` file of one supervisor (owner-only, never a symlink)."""

    def __init__(self, path: str) -> None:
        self.path = path
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        self._fd: int | None = os.open(path, flags, 0o600)

    def add(self, entries: Iterable[Entry]) -> None:
        """Append entries in one write (a reader never sees half a line of a batch)."""
        data = "".join(entry.line() for entry in entries).encode()
        if data and self._fd is not None:
            os.write(self._fd, data)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def read_entries(path: str) -> list[Entry]:
    """The entries of a ``.pids`` file; malformed lines (a torn write) are skipped."""
    try:
        with open(path) as handle:
            lines = handle.read().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        fields = line.split(" ", 2)
        if len(fields) == 3 and fields[0].isdigit() and fields[1].isdigit():
            found.append(Entry(int(fields[0]), int(fields[1]), fields[2]))
    return found


def write_layers(directory: str, name: str, data: dict[str, Any]) -> str:
    """Write ``<name>.json`` atomically, owner-only; its path."""
    path = os.path.join(directory, f"{name}.json")
    tmp = os.path.join(directory, f".{name}.json.{os.getpid()}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return path


def supervisors_here(directory: str, machine: Machine) -> list[tuple[str, dict[str, Any]]]:
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


def supervisor_here(directory: str, name: str, machine: Machine) -> dict[str, Any] | None:
    """The layers supervisor ``name`` wrote into ``directory`` on this machine; None when
    it wrote none (or on another machine). One file: a local agent looking for the
    controller's reads that one, not every agent's (128 agents read 128 files each)."""
    if not name or os.sep in name or name.startswith("."):
        return None  # a name, not a path
    try:
        with open(os.path.join(directory, f"{name}.json")) as handle:
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
