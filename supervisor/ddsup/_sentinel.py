"""Find and kill every process of one run, and the sentinel program that does it when we die.

This module is the whole of what the sentinel process runs, so it imports the standard
library only and nothing of ddsup: the sentinel is started as ``python -I -S _sentinel.py``
(no site-packages, no ``.pth`` files), which keeps its start-up in the tens of milliseconds
and keeps it working when the supervisor's environment is broken. ``ddsup._orphans`` uses
the same scanning functions, so there is exactly one definition of "a process of this run".

The sentinel holds the read end of a pipe whose write end only the supervisor holds. The
kernel closes that write end however the supervisor ends, SIGKILL included, so end of file
on the pipe is the one signal of "the supervisor is gone" that cannot be missed. A byte
``q`` before the end of file means a normal exit: the supervisor cleaned up by itself.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Collection, Iterator

ENV_NAME = "DDSUP_INVOCATION_ID"
QUIT = b"q"
SWEEP_SECONDS = 10.0
_POLL_SECONDS = 0.02


def _pids() -> Iterator[int]:
    for name in os.listdir("/proc"):
        if name.isdigit():
            yield int(name)


def _is_zombie(pid: int) -> bool:
    """A zombie (or a process gone meanwhile) is dead: only its parent's reaping is left."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rsplit(b")", 1)[-1].split()[0]
    except (OSError, IndexError):
        return True
    return state in (b"Z", b"X")


def read_environ(pid: int) -> dict[bytes, bytes]:
    """The environment a process was started with; empty when unreadable or gone."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as environ:
            data = environ.read()
    except OSError:
        return {}
    items = (item.partition(b"=") for item in data.split(b"\0") if item)
    return {key: value for key, _, value in items}


def find_run_processes(invocation_id: str, *, exclude: Collection[int] = ()) -> list[int]:
    """PIDs of live processes whose environment has ``DDSUP_INVOCATION_ID=<invocation_id>``.

    This process is never included. A process whose environment cannot be read (another
    user's) is not ours to end and is skipped.
    """
    wanted = invocation_id.encode()
    skip = {os.getpid(), *exclude}
    found = []
    for pid in _pids():
        if pid in skip or read_environ(pid).get(ENV_NAME.encode()) != wanted:
            continue
        if not _is_zombie(pid):
            found.append(pid)
    return sorted(found)


def kill_process_and_group(pid: int) -> None:
    """SIGKILL ``pid``, and its process group when it leads one (never our own group)."""
    try:
        leads_group = os.getpgid(pid) == pid  # before the kill: a dead pid has no group
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return
    if leads_group and pid != os.getpgrp():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


def sweep(invocation_id: str, *, exclude: Collection[int] = ()) -> list[int]:
    """SIGKILL every live process of the run (and the groups they lead); the PIDs hit."""
    hit = find_run_processes(invocation_id, exclude=exclude)
    for pid in hit:
        kill_process_and_group(pid)
    return hit


def sweep_until_gone_sync(
    invocation_id: str, *, timeout: float = SWEEP_SECONDS, exclude: Collection[int] = ()
) -> tuple[set[int], list[int]]:
    """Sweep until nothing of the run is left or ``timeout`` passed: (PIDs hit, survivors).

    Killed processes need a moment to die (a process in uninterruptible sleep, e.g. in a
    GPU driver call, dies only when the call returns), and a process may fork while we
    sweep, so one pass is not enough; this polls with a bounded deadline because there is
    no event for "a process that is not our child has died".
    """
    deadline = time.monotonic() + timeout
    hit: set[int] = set()
    while True:
        found = sweep(invocation_id, exclude=exclude)
        hit.update(found)
        if not found:
            return hit, []
        if time.monotonic() >= deadline:
            return hit, find_run_processes(invocation_id, exclude=exclude)
        time.sleep(_POLL_SECONDS)


def _ignore_stop_signals() -> None:
    """The supervisor decides when its units stop; a SIGTERM from scancel or a Ctrl-C
    must reach the supervisor (for a graceful stop), not make the sentinel sweep early."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_IGN)


def _wait_for_parent(fd: int) -> bool:
    """Block until the supervisor closes the pipe; True when it asked us to quit."""
    while True:
        data = os.read(fd, 1)
        if not data:
            return False
        if data == QUIT:
            return True


def main(argv: list[str]) -> int:
    """``_sentinel.py FD INVOCATION_ID``: sweep the run once FD reaches end of file."""
    if len(argv) != 3 or not argv[1].isdigit() or not argv[2]:
        print(
            "usage: _sentinel.py FD INVOCATION_ID (started by ddsup, not by hand)", file=sys.stderr
        )
        return 2
    _ignore_stop_signals()
    if _wait_for_parent(int(argv[1])):
        return 0
    hit, survivors = sweep_until_gone_sync(argv[2])
    if hit or survivors:
        with contextlib.suppress(OSError):  # stderr may be gone with the supervisor
            print(
                f"ddsup sentinel: the supervisor of run {argv[2]} ended without cleaning up;"
                f" killed {len(hit)} process(es), {len(survivors)} survived: {survivors}",
                file=sys.stderr,
            )
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
