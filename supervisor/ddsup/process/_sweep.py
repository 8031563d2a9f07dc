"""The sweep by invocation id: SIGKILL every process that carries a run's tag, and
everything below those.

Every process a run starts has ``DDSUP_INVOCATION_ID=<id>`` in its environment, and its
children inherit it, unless they clear or overwrite it: those are still found while a
tagged process is their ancestor. The sweep is the last no-orphan layer that needs nothing but
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
AGENT_ENV = "DDSUP_AGENT"  # the node of the agent that started it (its units, inherited)
SWEEP_SECONDS = 10.0
_POLL_SECONDS = 0.02


def find_run_processes(
    invocation_id: str, *, exclude: Collection[int] = (), agent: str | None = None
) -> list[int]:
    """PIDs of live processes whose environment has ``DDSUP_INVOCATION_ID=<invocation_id>``
    (and ``DDSUP_AGENT=<agent>`` when ``agent`` is given).

    This process is never included. A process whose environment cannot be read (another
    user's) is not ours to end and is skipped. ``agent`` keeps a node agent's sweep to the
    units it started: not those of the controller on the same node (the endpoint, the
    worker), nor those of other agents where simulated nodes share one machine.
    """
    wanted = invocation_id.encode()
    skip = {os.getpid(), *exclude}
    found = []
    for pid in _proc.pids():
        if pid in skip:
            continue
        environ = _proc.read_environ(pid)
        if environ.get(ENV_NAME.encode()) != wanted:
            continue
        if agent is not None and environ.get(AGENT_ENV.encode()) != agent.encode():
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


def descendants(pids: Collection[int], *, exclude: Collection[int] = ()) -> list[int]:
    """Every process below ``pids`` (one pass over ``/proc``), except ``exclude`` and us."""
    children = _proc.parent_map()
    skip = {os.getpid(), *exclude}
    found: list[int] = []
    pending = list(pids)
    while pending:
        for child in children.get(pending.pop(), ()):
            if child not in skip and child not in found:
                found.append(child)
                pending.append(child)
    return found


def sweep(
    invocation_id: str, *, exclude: Collection[int] = (), agent: str | None = None
) -> list[int]:
    """SIGKILL every live process of the run (of ``agent``'s units, when given), the groups
    they lead, and every process below them (an engine that cleared its environment is
    still its tagged parent's child, and an orphan adopted by a node agent is the
    agent's); the PIDs hit."""
    tagged = find_run_processes(invocation_id, exclude=exclude, agent=agent)
    below = [pid for pid in descendants(tagged, exclude=exclude) if not _proc.is_dead(pid)]
    for pid in below:  # read before the kills: a killed parent's children move away
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    for pid in tagged:
        kill_process_and_group(pid)
    return sorted({*tagged, *below})


def sweep_until_gone_sync(
    invocation_id: str,
    *,
    timeout: float = SWEEP_SECONDS,
    exclude: Collection[int] = (),
    agent: str | None = None,
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
        found = sweep(invocation_id, exclude=exclude, agent=agent)
        hit.update(found)
        if not found:
            return hit, []
        if time.monotonic() >= deadline:
            return hit, find_run_processes(invocation_id, exclude=exclude, agent=agent)
        time.sleep(_POLL_SECONDS)
