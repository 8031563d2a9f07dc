"""The supervisor's end of its spawner: units' processes born in their cgroups, no move.

Without it, a unit's process is born in its cgroup because the supervisor moves itself
in to fork it (``UnitScope.fork_inside``), and the first move after a quiet spell waits
for an RCU grace period (a few scheduler ticks: docs/no-orphans.md): on every restart of
a unit that ran longer than that, between its exit and its next start. The spawner
(``_spawner_program``, a process of its own) forks with ``clone3(CLONE_INTO_CGROUP |
CLONE_PARENT)`` instead: the unit's process is born in its cgroup and is our child, with
nobody moved.

A containment with a cgroup v2 subtree has one :class:`Spawner`, started the first time
one of its units' processes ends (a restart may follow; the first starts of a run fork
as before, so that a run whose units never end pays for no process), and used once it
has said it can clone into a cgroup. Whatever goes wrong with it (a kernel without
``clone3`` or ``CLONE_INTO_CGROUP``, a seccomp filter, a unit that killed it) sends the
unit's start back to the move, which then says why the unit is not contained if it
cannot be; a start is never refused for the spawner's sake.
"""

from __future__ import annotations

import array
import logging
import marshal
import os
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import trio

from ddsup.process import _cgroup
from ddsup.process import _spawner_program as program
from ddsup.process._adopted import AdoptedProcess, ReparentedChild
from ddsup.process._managed import managed_children
from ddsup.process._popen import spawn_error

log = logging.getLogger(__name__)

ANSWER_TIMEOUT = 30.0  # seconds for a clone and its exec (a program on a stalled file system)
_CLOSE_GRACE = 2.0  # seconds for the spawner to exit at the end of file, before SIGKILL


class SpawnRequest(NamedTuple):
    """What ``spawn`` starts for a unit: its command line, environment, working
    directory, and the descriptor its stdout and stderr go to."""

    argv: Sequence[str]
    env: Mapping[str, str]
    cwd: str | os.PathLike[str]
    out_fd: int


class SpawnerFailed(Exception):
    """The spawner started nothing (``unknown``: or cannot say what it started, having
    broken in the middle): fork another way."""

    def __init__(self, reason: str, *, unknown: bool = False) -> None:
        super().__init__(reason)
        self.unknown = unknown


class Spawner:
    """One supervisor's spawner (see the module docstring); :meth:`run` is its task."""

    def __init__(self, home: _cgroup.Cgroup) -> None:
        self._home = home  # the supervisor's own leaf: where the spawner lives
        self._wanted = trio.Event()
        self._socket: trio.socket.SocketType | None = None
        self._popen: subprocess.Popen[bytes] | None = None  # until reaped
        self.ready = False  # it said it can clone into a cgroup, and has not failed since
        self.booted = trio.Event()  # it said whether it can (or died before it could)

    def want(self) -> None:
        """Start it (in :meth:`run`) if it is not started yet."""
        self._wanted.set()

    async def run(self) -> None:
        """Until cancelled: once wanted, start the spawner, and serve with it while it
        lives; at the end, close it and reap it."""
        await self._wanted.wait()
        registry = managed_children()
        async with registry.lock:  # a fork of ours: never while a unit's fork is in a cgroup
            try:
                popen, ours = _start(self._home)
            except OSError as err:  # out of processes or descriptors: units fork as before
                log.warning("cannot start the spawner (%s): units fork from their cgroups", err)
                self.booted.set()
                return
            registry.pids.add(popen.pid)
        self._popen = popen
        self._socket = trio.socket.from_stdlib_socket(ours)
        process = AdoptedProcess(popen)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._boot)
                status = await process.wait()
                nursery.cancel_scope.cancel()
            if self.ready:
                log.warning("the spawner exited (%s): units fork from their cgroups", status)
        finally:
            self.ready = False
            self._socket.close()  # the spawner's end of file: it exits
            with trio.CancelScope(shield=True):
                with trio.move_on_after(_CLOSE_GRACE):
                    await process.wait()
                if process.returncode is None:
                    popen.kill()
                    await process.wait()
            self._popen = None
            registry.pids.discard(popen.pid)

    async def _boot(self) -> None:
        """Its first line: whether it can clone into a cgroup here."""
        assert self._socket is not None
        try:
            line = b""
            while not line.endswith(b"\n"):
                more = await self._socket.recv(64)
                if not more:
                    return  # it died first: ``run`` says so
                line += more
            self.ready = line == b"ok\n"
            if not self.ready:
                words = line.split()
                errno = int(words[-1]) if words[-1].isdigit() else 0
                reason = os.strerror(errno)
                log.info("no clone into a cgroup here (%s): units fork from their cgroups", reason)
        finally:
            self.booted.set()

    async def spawn(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: str | os.PathLike[str],
        out_fd: int,
        cgroup: _cgroup.Cgroup,
    ) -> ReparentedChild:
        """``argv`` started as ``spawn`` starts a unit, born in ``cgroup`` (which exists):
        our child. Raises SpawnError when the program cannot be started, SpawnerFailed
        when nothing was started (the caller forks another way; it ends what may be in
        ``cgroup`` first when the spawner broke in the middle)."""
        try:
            body = marshal.dumps(([os.fsdecode(a) for a in argv], dict(env), os.fsdecode(cwd)))
            cgroup_fd = os.open(cgroup.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except (OSError, ValueError) as err:  # nothing asked: nothing started
            raise SpawnerFailed(f"cannot ask the spawner: {err}") from err
        try:
            with trio.fail_after(ANSWER_TIMEOUT):
                answer = await self._ask(body, [out_fd, cgroup_fd])
        except (OSError, EOFError, trio.TooSlowError) as err:
            self._broken(err)
            raise SpawnerFailed(f"the spawner broke: {err!r}", unknown=True) from err
        finally:
            os.close(cgroup_fd)
        pid, step, errno = (
            int.from_bytes(answer[i : i + 4], "little", signed=True) for i in (0, 4, 8)
        )
        if step == program.OK:
            return ReparentedChild(pid, argv)
        if pid > 0:  # it failed before its exec: ours to reap
            await AdoptedProcess(ReparentedChild(pid, argv)).wait()
        if step == program.CLONE:
            raise SpawnerFailed(f"clone3 into {cgroup.path}: {os.strerror(errno)}")
        culprit = os.fspath(cwd) if step == program.CHDIR else argv[0]
        raise spawn_error(argv, cwd, OSError(errno, os.strerror(errno), culprit))

    async def _ask(self, body: bytes, fds: list[int]) -> bytes:
        assert self._socket is not None
        data = len(body).to_bytes(4, "little") + body
        rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
        sent = await self._socket.sendmsg([data], rights)
        while sent < len(data):
            sent += await self._socket.send(data[sent:])
        answer = b""
        while len(answer) < program.ANSWER:
            more = await self._socket.recv(program.ANSWER - len(answer))
            if not more:
                raise EOFError("the spawner closed its end")
            answer += more
        return answer

    def _broken(self, err: BaseException) -> None:
        """Not used again, and killed: what it is doing is unknown (``run`` reaps it)."""
        if self.ready:
            log.warning("the spawner broke (%r): units fork from their cgroups", err)
        self.ready = False
        if self._popen is not None:
            self._popen.kill()  # not reaped yet (``run`` does it): the PID is still its


def _start(home: _cgroup.Cgroup) -> tuple[subprocess.Popen[bytes], socket.socket]:
    """The spawner's process (in ``home``, where we are) and our end of its socket."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    argv = [sys.executable, "-I", "-S", program.__file__, str(theirs.fileno()), home.path]
    try:
        popen = subprocess.Popen(
            argv,
            cwd="/",
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            pass_fds=(theirs.fileno(),),
            start_new_session=True,  # a terminal's Ctrl-C is ddsup's to handle
        )
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
    return popen, ours
