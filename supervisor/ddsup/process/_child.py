"""One child process: started without a shell in its own session, stopped as a whole tree.

A unit process runs in a new session (so it leads its own process group and no terminal
signal or group kill of ours reaches it by accident), with stdin on ``/dev/null`` and
stdout and stderr into the pipe of its instance's :class:`~ddsup.process.OutputLog`
(which never makes it wait, and rotates the file), or appended to a log file by the child
itself (probes, agents).

Stopping is ``kill_signal`` to the group, a grace of ``timeout_stop``, SIGKILL to the
group, and then SIGKILL to descendants that escaped the group (vLLM's engine processes
call ``setsid``): those recorded in the process tree before the first signal, and those
whose environment carries this child's ``DDSUP_*`` identity (they survive the death of
the process in between, which breaks the tree). A unit process in its own cgroup needs
neither pass over ``/proc``: ending the cgroup ends all it started (``UnitScope``).

Children we start are *managed* (``_managed``): the adopted-orphan reaper never reaps
them, so their owner's ``wait`` (on a pidfd, ``_adopted``) keeps their exit status.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from functools import partial
from typing import TYPE_CHECKING

import trio

from ddsup._exit import ExitStatus
from ddsup.process._adopted import AdoptedProcess, Reapable
from ddsup.process._containment import current_containment
from ddsup.process._file_at import LogFile
from ddsup.process._managed import ManagedChildren, managed_children
from ddsup.process._popen import LogError as LogError
from ddsup.process._popen import SpawnError as SpawnError
from ddsup.process._popen import open_log, spawn_error
from ddsup.process._proc import read_environ
from ddsup.process._spawner import SpawnRequest
from ddsup.process._subreaper import is_subreaper
from ddsup.process._table import ProcessTable, process_table
from ddsup.process._unit_scope import UnitScope

if TYPE_CHECKING:
    # imported where a stop needs it: every node agent imports this module, and psutil
    # (a noticeable part of its start-up) only serves the stop of a tree
    import psutil

log = logging.getLogger(__name__)

_ESCAPED_GRACE = 5.0  # seconds for SIGKILLed escaped descendants to die (no event exists)


def identity_of(env: Mapping[str, str]) -> frozenset[tuple[bytes, bytes]]:
    """The ``DDSUP_*`` variables that mark a unit's processes (empty without an invocation id)."""
    if "DDSUP_INVOCATION_ID" not in env:
        return frozenset()
    return frozenset(
        (key.encode(), value.encode()) for key, value in env.items() if key.startswith("DDSUP_")
    )


class ChildProcess:
    """A started child; ``stop`` ends it and everything it started, and always reaps it."""

    def __init__(
        self,
        process: trio.Process | AdoptedProcess,
        identity: frozenset[tuple[bytes, bytes]],
        registry: ManagedChildren,
        scope: UnitScope | None = None,
    ) -> None:
        self._process = process
        self._identity = identity
        self._registry = registry
        self._scope = scope
        self.pid: int = process.pid
        self._status: ExitStatus | None = None
        self._stop_lock = trio.Lock()
        self._stopped: ExitStatus | None = None

    def __repr__(self) -> str:
        state = "running" if self.status is None else self.status.describe()
        return f"<ChildProcess {self.pid} {self._process.args!r}: {state}>"

    @property
    def status(self) -> ExitStatus | None:
        """The exit status once the child has been reaped (reaping it now if it just ended)."""
        if self._status is None:
            returncode = self._process.poll()
            if returncode is not None:
                self._record(returncode)
        return self._status

    @property
    def returncode(self) -> ExitStatus | None:
        """Alias of ``status``, named like ``Popen.returncode``."""
        return self.status

    def _record(self, returncode: int) -> None:
        if self._status is None:
            self._status = ExitStatus.from_returncode(returncode)
        self._registry.pids.discard(self.pid)

    async def wait(self) -> ExitStatus:
        """Until the child exits (trio waits on a pidfd: no polling). Safe to call again."""
        if self._status is None:
            self._record(await self._process.wait())
        assert self._status is not None
        return self._status

    def signal_group(self, sig: int) -> None:
        """Send ``sig`` to the child's process group; a group already gone is not an error."""
        with suppress(ProcessLookupError):
            os.killpg(self.pid, sig)

    async def stop(self, kill_signal: int, timeout_stop: float) -> ExitStatus:
        """Stop the whole tree and reap the child; shielded, so it always finishes."""
        with trio.CancelScope(shield=True):
            async with self._stop_lock:
                if self._stopped is None:
                    self._stopped = await self._stop(kill_signal, timeout_stop)
        assert self._stopped is not None
        return self._stopped

    async def _stop(self, kill_signal: int, timeout_stop: float) -> ExitStatus:
        # The tree is recorded only while the child lives: once it has exited, its
        # descendants were reparented to us (a subreaper) and the identity scan finds them.
        # Skipping this /proc scan keeps the crash → restart gap short. In its unit's
        # cgroup, nothing escapes it: the scope's end ends the cgroup, and no scan is needed.
        contained = self._scope is not None and self._scope.contained
        tree: list[psutil.Process] = []
        if self.status is None and not contained:
            tree = _processes((await process_table()), self.pid)
        if self.status is None:
            self.signal_group(kill_signal)
            with trio.move_on_after(timeout_stop):
                await self.wait()
        self.signal_group(signal.SIGKILL)
        status = await self.wait()
        table = None if contained else await self._kill_escaped(tree)
        if self._scope is not None:
            # its cgroup and registry entries: what escaped us above (``table``, read after
            # the exit, also shows what it orphaned, for the record)
            await self._scope.end(table)
        return status

    async def _kill_escaped(self, tree: list[psutil.Process]) -> ProcessTable | None:
        """SIGKILL what left the group: the recorded tree, and carriers of our identity;
        the process table it read for those (None without an identity)."""
        pidfds = [fd for fd in map(_open_if_same, tree) if fd is not None]
        protected = frozenset(self._registry.pids)
        table = await process_table() if self._identity else None
        found = await trio.to_thread.run_sync(self._identity_carriers, protected, table)
        carriers = map(self._open_if_carrier, found)
        pidfds += [fd for fd in carriers if fd is not None]
        try:
            for fd in pidfds:
                _pidfd_kill(fd)
            with trio.move_on_after(_ESCAPED_GRACE) as grace:
                for fd in pidfds:  # a pidfd turns readable when its process has ended
                    await trio.lowlevel.wait_readable(fd)
            if grace.cancelled_caught:  # e.g. stuck in a driver call: the final sweep retries
                log.warning(
                    "pid %d: SIGKILLed descendants still alive after %ss", self.pid, _ESCAPED_GRACE
                )
        finally:
            for fd in pidfds:
                os.close(fd)
        return table

    def _identity_carriers(self, managed: frozenset[int], table: ProcessTable | None) -> list[int]:
        """Live processes with our identity, except managed units' groups and our ancestry."""
        if not self._identity or table is None:
            return []
        protected = managed | {os.getpid()} | _ancestors()
        found = []
        for pid in _candidates(table):
            if pid in protected or not _carries(read_environ(pid), self._identity):
                continue
            try:
                if os.getpgid(pid) in protected:
                    continue  # a live sibling unit's group: never ours to kill
            except ProcessLookupError:
                continue
            found.append(pid)
        return found

    def _open_if_carrier(self, pid: int) -> int | None:
        """A pidfd for ``pid`` if, once pinned by the pidfd, it still carries our identity."""
        fd = _pidfd_open(pid)
        if fd is not None and not _carries(read_environ(pid), self._identity):
            os.close(fd)
            return None
        return fd


def _candidates(table: ProcessTable) -> list[int]:
    """PIDs that may hold an escaped descendant of ours.

    As a subreaper (ddsup start and every agent are), whatever a unit leaves behind is
    reparented to us and stays in our own subtree: only that subtree's environments are
    read, so a stop costs the same on a node running 1,000 other processes. Without the
    subreaper flag (library use), escapes go to init and every process is a candidate.
    """
    if not is_subreaper():
        return [pid for pids in table.children.values() for pid in pids]
    return table.descendants(os.getpid())


def _carries(environ: Mapping[bytes, bytes], identity: frozenset[tuple[bytes, bytes]]) -> bool:
    return all(environ.get(key) == value for key, value in identity)


def _ancestors() -> set[int]:
    import psutil

    return {p.pid for p in psutil.Process().parents()}


def _processes(table: ProcessTable, pid: int) -> list[psutil.Process]:
    """``pid``'s descendants in ``table``, pinned by their start time (PIDs get reused)."""
    import psutil

    found = []
    for descendant in table.descendants(pid):
        with suppress(psutil.Error):
            found.append(psutil.Process(descendant))
    return found


def _pidfd_open(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except OSError:  # gone already (ESRCH)
        return None


def _open_if_same(proc: psutil.Process) -> int | None:
    """A pidfd for ``proc`` unless its PID now names another process (same start time)."""
    fd = _pidfd_open(proc.pid)
    if fd is not None and not proc.is_running():
        os.close(fd)
        return None
    return fd


def _pidfd_kill(fd: int) -> None:
    """SIGKILL through the pidfd: it cannot hit a process that reused the PID."""
    with suppress(ProcessLookupError):
        signal.pidfd_send_signal(fd, signal.SIGKILL)


def _share(fd: int) -> int:
    """A copy of our descriptor ``fd`` for a child; /dev/null when ``fd`` is closed."""
    try:
        return os.dup(fd)
    except OSError:
        return os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)


async def spawn(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str | os.PathLike[str],
    log_path: LogFile | os.PathLike[str] | int | None = None,
    output: int | None = None,
    on_log_error: LogError | None = None,
    unit: str | None = None,
) -> ChildProcess:
    """Start ``argv`` (no shell) in its own session, stdin ``/dev/null``.

    Its stdout and stderr go to ``output`` (a file descriptor, e.g. the write end of an
    :class:`~ddsup.process._output_log.OutputLog` pipe; the caller keeps and closes it),
    or to ``log_path``: a file the child appends to (never through a symlink; when it
    cannot be opened, ``on_log_error`` hears why and the output goes to /dev/null, or
    else it is a SpawnError), or a descriptor of ours the child shares (the endpoint's
    workers write to its stderr). ``unit`` names the unit instance the process is:
    inside an open containment (``open_containment``) it then starts in that unit's
    cgroup, is recorded in the registry, and whatever it leaves is ended when it stops.
    """
    if not argv:
        raise SpawnError("cannot start a process with an empty argv")
    if output is not None:
        out_fd = output
    elif isinstance(log_path, int):
        out_fd = _share(log_path)
    elif log_path is not None:
        out_fd = open_log(log_path, on_log_error)
    else:
        raise ValueError("spawn needs one of log_path and output")
    registry = managed_children()
    containment = current_containment()
    scope = None if containment is None or unit is None else containment.scope(unit)
    try:
        async with registry.lock:  # the reaper waits from the fork to the registration
            fork = partial(_fork_exec, argv, env, cwd, out_fd)
            request = SpawnRequest(argv, env, cwd, out_fd)
            popen = fork() if scope is None else await scope.spawn_inside(fork, request)
            registry.pids.add(popen.pid)
    finally:
        if output is None:
            os.close(out_fd)
    if scope is not None:
        scope.started(popen.pid)
    return ChildProcess(AdoptedProcess(popen), identity_of(env), registry, scope)


def _fork_exec(
    argv: Sequence[str], env: Mapping[str, str], cwd: str | os.PathLike[str], out_fd: int
) -> subprocess.Popen[bytes]:
    """``argv`` in a new session. With no ``preexec_fn`` ``subprocess`` vforks, and the
    calling thread is suspended only until the child has exec'd: the event loop's thread for a unit without a cgroup (less
    than handing the fork to a worker thread, as ``trio.lowlevel.open_process`` does),
    ``UnitScope.fork_inside``'s worker thread for one with a cgroup. The price on the
    loop: an exec that is slow (a program on a cold network file system) holds it as long."""
    try:
        return subprocess.Popen(
            list(argv),
            env=dict(env),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=out_fd,
            stderr=out_fd,
            start_new_session=True,
        )
    except OSError as err:
        raise spawn_error(argv, cwd, err) from err


def adopt(popen: Reapable, env: Mapping[str, str]) -> ChildProcess:
    """The child ``popen`` (started before trio ran, ``_popen.start_child``, or forked by
    an agent forker and reparented to us, ``_adopted.ReparentedChild``, with ``env``),
    now owned here as if ``spawn`` had started it: managed (the adopted-orphan reaper
    leaves it to its owner), waited for as trio waits for its own (``_adopted``). Call it
    before the containment's reaper starts (``open_containment``), which would otherwise
    take its exit status."""
    registry = managed_children()
    registry.pids.add(popen.pid)
    process = AdoptedProcess(popen)
    return ChildProcess(process, identity_of(env), registry)


@asynccontextmanager
async def supervised(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str | os.PathLike[str],
    log_path: os.PathLike[str],
    kill_signal: int = signal.SIGTERM,
    timeout_stop: float = 30.0,
) -> AsyncIterator[ChildProcess]:
    """The one-owner form: whatever ends the block, the child's tree is stopped and reaped."""
    child = await spawn(argv, env=env, cwd=cwd, log_path=log_path)
    try:
        yield child
    finally:
        await child.stop(kill_signal, timeout_stop)
