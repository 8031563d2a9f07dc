"""The children this trio run started itself, which their owners (not the reaper) reap.

ddsup is a child subreaper: orphans of its units are reparented to it, and
``_subreaper.reap_adopted_children`` reaps their zombies. Children that ``spawn`` started
are owned by a task that waits for them (``AdoptedProcess.wait``); if the reaper took
their exit status first, the owner would lose it. So ``spawn`` registers each PID here,
and holds the lock from the fork to the registration, so that a child which exits at
once is never seen by the reaper as an unknown zombie.
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
