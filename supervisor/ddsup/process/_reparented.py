"""A child that another process forked: it became ours when that process ended, or was
ours from its birth.

Local agents are forked by one process that imported their code once (``run.
_agent_forker``); it reports each one's PID and exits, and the kernel reparents them to
the nearest child subreaper, ``ddsup start`` (``_subreaper_flag``). A unit's process
that the spawner cloned (``_spawner``, ``CLONE_PARENT``) is our child from the start.
Either way :class:`ReparentedChild` reaps it the way ``subprocess.Popen`` reaps one it
started, with the same exit-status convention, so :class:`~ddsup.process._adopted.
AdoptedProcess` waits for it like any other child started before trio ran.

The PID cannot have been reused before we hold it: until its forker has exited, only
the forker can reap it, and after that only we can (the spawner cannot reap what it
cloned for us; our adopted-orphan reaper waits for the lock that the spawn holds until
the PID is registered).
"""

from __future__ import annotations

import os
from collections.abc import Sequence


class ReparentedChild:
    """A child of ours by reparenting; ``poll``/``wait``/``returncode`` as ``Popen``'s."""

    def __init__(self, pid: int, args: Sequence[str]) -> None:
        self.pid = pid
        self.args = list(args)
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """Reap the child if it has exited; its exit status, else ``None``."""
        return self._reap(os.WNOHANG)

    def wait(self) -> int:
        """Block until the child has exited and is reaped (the caller knows it has)."""
        status = self._reap(0)
        assert status is not None
        return status

    def _reap(self, flags: int) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, flags)
            except ChildProcessError:  # not ours (never was, or reaped elsewhere)
                self.returncode = 255
            else:
                if pid == self.pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode
