"""The one reader of ``/proc`` for tests: who is alive, what it carries, who its parent is.

Tests find the processes of a run by the environment every one of them inherits
(``DDSUP_INVOCATION_ID``, or the suite's ``DDSUP_TEST_SESSION``), which psutil cannot
filter cheaply; a process that vanishes between two reads is simply not there.
"""

from __future__ import annotations

from pathlib import Path

PROC = Path("/proc")


def pids() -> list[int]:
    return [int(entry.name) for entry in PROC.iterdir() if entry.name.isdigit()]


def environ(pid: int) -> dict[bytes, bytes]:
    """The process's environment ({} once it is gone or unreadable)."""
    try:
        data = (PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return {}
    return dict(item.partition(b"=")[::2] for item in data.split(b"\0") if item)


def _stat(pid: int) -> list[bytes]:
    """The fields of ``/proc/PID/stat`` after the command name (state first)."""
    try:
        return (PROC / str(pid) / "stat").read_bytes().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return []


def alive(pid: int) -> bool:
    """Running or sleeping: not gone, not a zombie (its parent's reaping is another matter)."""
    fields = _stat(pid)
    return bool(fields) and fields[0] not in (b"Z", b"X")


def state(pid: int) -> str | None:
    """The one-letter state (``R``, ``S``, ``Z`` …), None once it is gone."""
    fields = _stat(pid)
    return fields[0].decode() if fields else None


def parent(pid: int) -> int | None:
    fields = _stat(pid)
    return int(fields[1]) if len(fields) > 1 else None


def cmdline(pid: int) -> list[str]:
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def carrying(name: str, value: str | None = None) -> dict[int, str]:
    """Live processes whose environment has ``name`` (``=value`` when given): PID → value."""
    key, wanted = name.encode(), None if value is None else value.encode()
    found = {}
    for pid in pids():
        have = environ(pid).get(key)
        if have is not None and wanted in (None, have) and alive(pid):
            found[pid] = have.decode(errors="replace")
    return found


def last_pid() -> int:
    """The PID the kernel assigned most recently (last field of ``/proc/loadavg``)."""
    return int((PROC / "loadavg").read_text().split()[-1])
