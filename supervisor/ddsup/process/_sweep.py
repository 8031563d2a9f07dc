"""The sweep by invocation id: find and SIGKILL every process that carries a run's tag.

Every process a run starts has ``DDSUP_INVOCATION_ID=<id>`` in its environment, and its
children inherit it. The sweep is the last no-orphan layer that needs nothing but
``/proc``: ``ddsup start`` runs it at the end of a run, the sentinel when the supervisor
was killed, ``ddsup cleanup`` by hand. It imports the standard library only (the
sentinel runs it under ``python -I -S``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Collection

if __package__:
    from ddsup.process import _proc
else:  # imported by the sentinel program, which put this folder on sys.path
    import _proc  # type: ignore[import-not-found,no-redef,unused-ignore]

ENV_NAME = "DDSUP_INVOCATION_ID"
NODE_ENV = "DDSUP_NODE"
SWEEP_SECONDS = 10.0
_POLL_SECONDS = 0.02


def find_run_processes(
    invocation_id: str, *, exclude: Collection[int] = (), node: str | None = None
) -> list[int]:
    """PIDs of live processes whose environment has ``DDSUP_INVOCATION_ID=<invocation_id>``
    (and ``DDSUP_NODE=<node>`` when ``node`` is given: one simulated node's processes).

    This process is never included. A process whose environment cannot be read (another
    user's) is not ours to end and is skipped.
    """
    wanted = invocation_id.encode()
    wanted_node = None if node is None else node.encode()
    skip = {os.getpid(), *exclude}
    found = []
    for pid in _proc.pids():
        if pid in skip:
            continue
        environ = _proc.read_environ(pid)
        if environ.get(ENV_NAME.encode()) != wanted:
            continue
        if wanted_node is not None and environ.get(NODE_ENV.encode()) != wanted_node:
            continue
        if not _proc.is_dead(pid):
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


def sweep(
    invocation_id: str, *, exclude: Collection[int] = (), node: str | None = None
) -> list[int]:
    """SIGKILL every live process of the run (of its ``node`` only, when given) and the
    groups they lead; the PIDs hit."""
    hit = find_run_processes(invocation_id, exclude=exclude, node=node)
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
