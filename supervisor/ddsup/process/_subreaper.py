"""Subreaper adoption: orphans of our units become our children, and we reap them.

``ddsup start`` and every node agent call :func:`become_subreaper`. A unit's setsid
grandchild whose parent died is then reparented to us instead of to init, so it stays in
our subtree (where the stop of a unit looks for escaped descendants) and its zombie is
reaped by :func:`reap_adopted_children`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal

import trio

from ddsup.process import _proc
from ddsup.process._managed import ManagedChildren, managed_children
from ddsup.process._subreaper_flag import become_subreaper as become_subreaper
from ddsup.process._subreaper_flag import is_subreaper as is_subreaper

log = logging.getLogger(__name__)


def _reapable(pid: int, own_session: int) -> bool:
    """A child we may reap: never a managed one (its owner reaps it), and never one in our
    own session. Orphans of our units can only be in other sessions (units start in new
    sessions, and no process can join a session), while a child in our session was forked
    by code in this process (``trio.run_process``, ``subprocess``) that will reap it."""
    try:
        return os.getsid(pid) != own_session
    except ProcessLookupError:
        return False


async def _reap_once() -> int:
    registry = managed_children()
    reaped, sure = await _reap_first_zombies(registry)
    if sure:
        return reaped
    # a /proc scan costs milliseconds per hundred processes: off the event loop, and
    # outside the lock, which a restart's spawn waits for (a scan under it would delay
    # every restart by the scan). A child forked while we scan is
    # registered by the time we hold the lock, so the check under it still skips it; and
    # a zombie we saw keeps its PID until we reap it.
    children = await trio.to_thread.run_sync(_proc.children_of, os.getpid())
    async with registry.lock:  # spawn holds it from fork to registration
        own_session = os.getsid(0)
        for pid in children - registry.pids:
            if not _reapable(pid, own_session):
                continue
            with contextlib.suppress(ChildProcessError):
                if os.waitpid(pid, os.WNOHANG)[0] == pid:  # noqa: ASYNC222 (WNOHANG: never blocks)
                    reaped += 1
    return reaped


async def _reap_first_zombies(registry: ManagedChildren) -> tuple[int, bool]:
    """Reap adopted zombies as the kernel hands them out, without a pass over ``/proc``:
    (how many, whether that was all of them).

    ``waitid(WNOWAIT)`` names one zombie child without reaping it. None left: done, and
    sure (the common case, once trio has reaped the unit that just exited). One that is
    not ours to reap (a managed child its owner has yet to wait for, a helper in our
    session): it hides the others, so the caller scans. The kernel hands out each
    thread's children in the order they became its children (and every thread's, the
    children of ``ddsup start``'s worker threads too, whose unit forks run there): the
    units, which ``spawn`` forks, then the orphans adopted after them; so a scan
    follows when the reaper runs before the owner of a unit that just exited has reaped
    it (``tests/process/test_orphans.py``).
    """
    reaped = 0
    async with registry.lock:
        own_session = os.getsid(0)
        while True:
            try:
                flags = os.WEXITED | os.WNOHANG | os.WNOWAIT  # never blocks, reaps nothing
                found = os.waitid(os.P_ALL, 0, flags)  # noqa: ASYNC222
            except ChildProcessError:  # no children at all
                return reaped, True
            if found is None:
                return reaped, True
            if found.si_pid in registry.pids or not _reapable(found.si_pid, own_session):
                return reaped, False
            with contextlib.suppress(ChildProcessError):
                os.waitpid(found.si_pid, os.WNOHANG)  # noqa: ASYNC222 (a zombie: never blocks)
                reaped += 1


async def reap_adopted_children(
    *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """Reap adopted zombies on every SIGCHLD, forever (run it in the supervisor's nursery)."""
    with trio.open_signal_receiver(signal.SIGCHLD) as signals:
        task_status.started()
        await _reap_once()  # orphans that died before we listened
        async for _ in signals:
            await _reap_once()
