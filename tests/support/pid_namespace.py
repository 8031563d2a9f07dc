"""``ddsup start`` in a PID namespace of its own, judged by the orphan oracle.

The oracle (``orphan_oracle.py``) is the namespace's PID 1: it starts ``ddsup start``,
and once that exits counts every live process left in the namespace, without ddsup's
tag, cgroups or records (nothing else runs there). :func:`oracle_argv` is the command
line, :class:`Namespace` the namespace seen from the host (its ``ddsup start``, signals
through a pidfd, the host PID of a PID that events name), :func:`read_report` the
oracle's verdict. The chaos schedules and the real-vLLM scenarios use it.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

ORACLE = Path(__file__).parent / "orphan_oracle.py"
POLL = 0.01  # seconds between looks for the namespace's processes (nothing announces them)


def oracle_prefix() -> list[str]:
    """``unshare`` into a PID namespace of our own (as root; else through a user
    namespace, where ddsup then has no cgroup to write: its other layers still hold)."""
    unshare = shutil.which("unshare")
    assert unshare, "the orphan oracle needs unshare(1) from util-linux"
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    return [unshare, *user, "--pid", "--fork", "--mount-proc", "--kill-child"]


def oracle_argv(report: Path, grace: float, command: list[str]) -> list[str]:
    """``command`` (``ddsup start …``) under the oracle, which writes its verdict to
    ``report``; ``grace``: seconds leftovers may take to go after ``command`` exits."""
    oracle = [sys.executable, str(ORACLE), str(report), str(grace)]
    return [*oracle_prefix(), *oracle, "--", *command]


@dataclass(frozen=True)
class OracleReport:
    """What the oracle saw once ``ddsup start`` had exited."""

    returncode: int  # negative: killed by that signal
    leftovers: dict[int, str]  # PID (in the namespace) → command line, after the grace
    empty_after: float | None  # seconds from the exit until nothing was left


def read_report(path: Path) -> OracleReport:
    """The oracle's verdict; raises OSError or ValueError when it wrote none."""
    data = json.loads(path.read_text())
    return OracleReport(
        returncode=int(data["returncode"]),
        leftovers={int(pid): str(cmd) for pid, cmd in data["leftovers"].items()},
        empty_after=data["empty_after"],
    )


@dataclass
class Namespace:
    """A run's PID namespace, seen from the host: its init and ``ddsup start``."""

    init: int
    start: int
    start_fd: int
    link: str  # /proc/PID/ns/pid of its processes

    @classmethod
    def of(cls, unshare: subprocess.Popen[bytes]) -> Namespace:
        """Find ``ddsup start`` below ``unshare`` → init (bounded poll: no event says a
        grandchild has been forked; it takes milliseconds)."""
        deadline = time.monotonic() + 20.0
        while time.monotonic() < deadline and unshare.poll() is None:
            try:
                [init] = psutil.Process(unshare.pid).children()
                [start] = init.children()
                fd = os.pidfd_open(start.pid)
                return cls(init.pid, start.pid, fd, os.readlink(f"/proc/{init.pid}/ns/pid"))
            except (ValueError, psutil.Error, OSError):
                time.sleep(POLL)
        raise AssertionError(f"ddsup start never appeared in the namespace (see {unshare.args!r})")

    def start_exited(self) -> bool:
        return bool(select.select([self.start_fd], [], [], 0)[0])  # a pidfd turns readable

    def wait_start(self, timeout: float | None = None) -> bool:
        """Until ``ddsup start`` has exited (or ``timeout`` seconds): whether it has."""
        return bool(select.select([self.start_fd], [], [], timeout)[0])

    def signal_start(self, signum: int) -> None:
        signal.pidfd_send_signal(self.start_fd, signum)

    def members(self) -> list[int]:
        """Host PIDs of the processes in the namespace now."""
        found = []
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                if os.readlink(f"/proc/{name}/ns/pid") == self.link:
                    found.append(int(name))
            except OSError:
                continue
        return found

    def host_pid(self, ns_pid: int) -> int | None:
        """The host PID of the namespace's ``ns_pid`` (``NSpid:`` of /proc/PID/status)."""
        for pid in self.members():
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            line = next((x for x in status.splitlines() if x.startswith("NSpid:")), "")
            if line.split()[-1:] == [str(ns_pid)]:
                return pid
        return None

    def close(self) -> None:
        os.close(self.start_fd)
