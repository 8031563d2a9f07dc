"""The children this trio run started itself, which their owners (not the reaper) reap.

ddsup is a child subreaper: orphans of its units are reparented to it, and
``_subreaper.reap_adopted_children`` reaps their zombies. Children that ``spawn`` started
are owned by a task that waits for them (``AdoptedProcess.wait``); if the reaper took
their exit status first, the owner would lose it. So ``spawn`` registers each PID here,
and holds the lock from the fork to the registration, so that a child which exits at
once is never seen by the reaper as an unknown zombie.

The same lock keeps a supervisor's other forks apart from a unit's: ``spawn`` holds it
while this process sits in the unit's cgroup to fork there, from a worker thread
(``UnitScope.fork_inside``), and a child forked by another thread meanwhile would be born
in that cgroup too. So any other child a running supervisor starts is forked under it
(:func:`fork_lock`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import trio


@dataclass
class ManagedChildren:
    """The PIDs of children started by ``spawn`` in this trio run, and the lock that makes
    "fork, then register" atomic for the reaper (which takes the same lock to scan)."""

    lock: trio.Lock = field(default_factory=trio.Lock)
    pids: set[int] = field(default_factory=set)


_MANAGED: trio.lowlevel.RunVar[ManagedChildren] = trio.lowlevel.RunVar("ddsup_managed_children")


def managed_children() -> ManagedChildren:
    """This trio run's registry of managed children (one per ``trio.run``, not global)."""
    try:
        return _MANAGED.get()
    except LookupError:
        registry = ManagedChildren()
        _MANAGED.set(registry)
        return registry


def fork_lock() -> trio.Lock:
    """The lock to hold while this process forks (``trio.run_process`` started with
    ``nursery.start``, which returns once the child exists): no unit's fork sits in its
    cgroup meanwhile (the module docstring)."""
    return managed_children().lock
