"""A ``subprocess`` child, waited for the way trio waits for its own children.

``ddsup start`` spawns its agents' ``srun`` with ``subprocess`` before it imports trio
(``_popen.start_child``), and ``spawn`` forks on the event loop's thread with
``subprocess`` (``_child._fork_exec``). trio's ``Process`` is made only by
``open_process``, which forks from a worker thread, so such a child is wrapped here:
:class:`AdoptedProcess` gives :class:`~ddsup.process._child.ChildProcess` the ``pid``,
``args``, ``poll()`` and ``await wait()`` it uses, and nothing of trio's private API is
needed.

It waits on a pidfd (Linux 5.3 and later), readable once the child has exited, then
reaps it; on an older kernel (``pidfd_open`` fails with ENOSYS: RHEL 8's 4.18, common
on clusters) a worker thread blocks in ``waitid(WNOWAIT)``, which sees the exit without
reaping it. Both are what trio itself does for the children it spawns.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from contextlib import suppress
from typing import Protocol

import trio


def _wait_exited(pid: int) -> None:
    """Block until ``pid`` has exited, leaving it for ``Popen`` to reap (a worker thread)."""
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)


def _open_pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except OSError as err:
        if err.errno != errno.ENOSYS:
            raise
        return None  # a kernel without pidfds: a thread waits instead


class Reapable(Protocol):
    """What is used of ``subprocess.Popen``: a child we reap (or ``ReparentedChild``)."""

    @property
    def pid(self) -> int: ...
    @property
    def args(self) -> object: ...
    @property
    def returncode(self) -> int | None: ...
    def poll(self) -> int | None: ...
    def wait(self) -> int: ...


class AdoptedProcess:
    """A ``subprocess.Popen`` child (or one reparented to us), owned by trio code now."""

    def __init__(self, popen: Reapable) -> None:
        self._popen = popen
        self.pid: int = popen.pid
        self.args = popen.args  # as trio's Process has it, for ChildProcess's repr
        self._pidfd = _open_pidfd(popen.pid)
        self._wait_lock = trio.Lock()

    @property
    def returncode(self) -> int | None:
        """The exit status once reaped (``Popen``'s convention: ``-N`` for signal ``N``)."""
        return self._popen.returncode

    def poll(self) -> int | None:
        """Reap the child if it has exited; its exit status, else ``None``."""
        returncode = self._popen.poll()
        if returncode is not None:
            self._close_pidfd()
        return returncode

    async def wait(self) -> int:
        """Until the child exits; it is reaped then. Safe to call from several tasks."""
        async with self._wait_lock:
            if self.poll() is None:
                if self._pidfd is not None:
                    # a concurrent poll() that reaps the child closes the pidfd under us
                    with suppress(trio.ClosedResourceError):
                        await trio.lowlevel.wait_readable(self._pidfd)
                else:
                    await trio.to_thread.run_sync(_wait_exited, self.pid, abandon_on_cancel=True)
                self._popen.wait()  # it has exited: this reaps at once, or has reaped
                self._close_pidfd()
        returncode = self._popen.returncode
        assert returncode is not None
        return returncode

    def _close_pidfd(self) -> None:
        fd, self._pidfd = self._pidfd, None
        if fd is not None:
            trio.lowlevel.notify_closing(fd)
            os.close(fd)


# --- a child that another process forked: ours once that process ended, or from birth -----
# Local agents are forked by one process that imported their code once
# (``agent._agent_forker``); it reports each one's PID and exits, and the kernel reparents them to
# the nearest child subreaper, ``ddsup start`` (``_subreaper_flag``). A unit's process
# that the spawner cloned (``_spawner``, ``CLONE_PARENT``) is our child from the start.
# Either way :class:`ReparentedChild` reaps it the way ``subprocess.Popen`` reaps one it
# started, with the same exit-status convention, so :class:`AdoptedProcess` waits for it like any other child started before trio ran.
#
# The PID cannot have been reused before we hold it: until its forker has exited, only
# the forker can reap it, and after that only we can (the spawner cannot reap what it
# cloned for us; our adopted-orphan reaper waits for the lock that the spawn holds until
# the PID is registered).


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
