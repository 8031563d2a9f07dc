"""The one reader of ``/proc``: which processes exist, and what the kernel says of each.

Every part of ddsup that looks at other processes (the stop of a unit's tree, the
adopted-orphan reaper, the sweep by invocation id, the sentinel, ``ddsup cleanup``) reads
them through these functions, so "a process", "its parent" and "its start time" mean the
same thing everywhere. The module imports the standard library only: the sentinel runs
it from a bare ``python -I -S`` (see ``_sentinel``).

A process can end between two reads; every function here treats that as "gone" (an
empty or ``None`` answer), never as an error.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Stat:
    """The fields of ``/proc/PID/stat`` that ddsup uses (see proc(5))."""

    pid: int
    state: str  # R, S, D, Z, X, T, …
    ppid: int
    pgrp: int
    session: int
    start_time: int  # clock ticks after boot: with the PID, a process's identity

    @property
    def dead(self) -> bool:
        """A zombie (or a process being torn down): only its parent's reaping is left."""
        return self.state in ("Z", "X")


def pids() -> Iterator[int]:
    """Every PID on this machine (in this PID namespace), in no particular order."""
    for name in os.listdir("/proc"):
        if name.isdigit():
            yield int(name)


def read_stat(pid: int) -> Stat | None:
    """``pid``'s stat line, or None when it is gone or unreadable.

    The command name (field 2) is in parentheses and may hold spaces or ``)``: fields are
    counted from the last ``)``.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    fields = data.rsplit(b")", 1)[-1].split()
    try:
        return Stat(
            pid=pid,
            state=fields[0].decode(),
            ppid=int(fields[1]),
            pgrp=int(fields[2]),
            session=int(fields[3]),
            start_time=int(fields[19]),
        )
    except (IndexError, ValueError):
        return None


def read_environ(pid: int) -> dict[bytes, bytes]:
    """The environment a process was started with; empty when unreadable or gone.

    ``setproctitle`` can overwrite this area (vLLM's engine processes call it): a process
    that lost its environment here is found by the other no-orphan layers, not by this.
    """
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            data = handle.read()
    except OSError:
        return {}
    items = (item.partition(b"=") for item in data.split(b"\0") if item)
    return {key: value for key, _, value in items}


def is_dead(pid: int) -> bool:
    """True for a zombie or a process that is gone."""
    stat = read_stat(pid)
    return stat is None or stat.dead


def children_of(parent: int) -> set[int]:
    """``parent``'s children, zombies included, by the parent field of every stat line.

    Not ``/proc/PID/task/*/children``: an orphan is adopted by one of the subreaper's
    threads, threads come and go, and that per-thread list was seen to miss adopted
    children.
    """
    return {pid for pid in pids() if _parent_of(pid) == parent}


def parent_map() -> dict[int, list[int]]:
    """Parent → children of every process, from one pass over ``/proc``."""
    children: dict[int, list[int]] = {}
    for pid in pids():
        ppid = _parent_of(pid)
        if ppid is not None:
            children.setdefault(ppid, []).append(pid)
    return children


def _parent_of(pid: int) -> int | None:
    """``pid``'s parent from its stat line (None when gone): the one field a pass over every
    process needs, read with two system calls and no full parse (cheaper than
    :func:`read_stat`; it runs on every unit's exit)."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
    except OSError:
        return None
    try:
        data = os.read(fd, 512)  # the parent is in the first 60 bytes (a name is ≤ 15)
    except OSError:
        return None
    finally:
        os.close(fd)
    after_name = data.rfind(b")")
    try:
        return int(data[after_name + 2 :].split(b" ", 2)[1])  # state, then the parent
    except (IndexError, ValueError):
        return None


def start_time(pid: int) -> int | None:
    """``pid``'s start time (clock ticks after boot), or None when it is gone or a zombie.

    With the PID, the identity of a process: a PID the kernel reused names a process that
    started later, so a recorded (PID, start time) never matches the newcomer.
    """
    stat = read_stat(pid)
    return None if stat is None or stat.dead else stat.start_time


def boot_id() -> str:
    """This kernel's boot id: a recorded start time means nothing after a reboot."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def pid_namespace() -> str:
    """This process's PID namespace (``pid:[inode]``): PIDs of another one are not ours."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def read_cgroups(pid: int | str = "self") -> dict[str, str]:
    """``pid``'s cgroup per hierarchy: ``""`` → the cgroup v2 path, a v1 controller name
    (``pids``, ``freezer``, …) → its path; empty when gone or unreadable."""
    try:
        with open(f"/proc/{pid}/cgroup") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return {}
    found: dict[str, str] = {}
    for line in lines:
        _id, controllers, path = [*line.split(":", 2), "", ""][:3]
        for controller in controllers.split(",") if controllers else [""]:
            found[controller] = path
    return found


@dataclass(frozen=True)
class CgroupMount:
    """A mounted cgroup hierarchy: ``version`` 2, or 1 with its ``controllers``."""

    mount_point: str
    root: str  # the cgroup this mount shows at its top (``/`` unless bind-mounted deeper)
    version: int
    controllers: frozenset[str]
    writable: bool


def cgroup_mounts() -> list[CgroupMount]:
    """The cgroup hierarchies mounted in this mount namespace (``/proc/self/mountinfo``)."""
    try:
        with open("/proc/self/mountinfo") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return []
    mounts = []
    for line in lines:
        before, _, after = line.partition(" - ")
        fields, tail = before.split(), after.split()
        if len(fields) < 6 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        options = set(tail[2].split(","))
        mounts.append(
            CgroupMount(
                mount_point=_unescape(fields[4]),
                root=_unescape(fields[3]),
                version=2 if tail[0] == "cgroup2" else 1,
                controllers=frozenset(options - {"rw", "ro", "relatime", "noatime"}),
                writable="rw" in fields[5].split(","),
            )
        )
    return mounts


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field
