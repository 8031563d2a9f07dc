"""One unit instance's share of a containment: its cgroup and its registry entries.

``spawn(..., unit=NAME)`` starts the process inside the unit's cgroup (the supervisor
holds itself there while it forks, so the child is born inside and not even a process it
forks at once can be outside it), and records the process in the registry. When that
process stops, :meth:`end` ends whatever the unit left: every process in its cgroup, and
every registry entry of the unit that is still the process that was seen.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from typing import TypeVar

import trio

from ddsup.process import _cgroup, _proc, _registry
from ddsup.process._adopted import Reapable
from ddsup.process._opening import Records as Records
from ddsup.process._spawner import Spawner, SpawnerFailed, SpawnRequest
from ddsup.process._table import ProcessTable

log = logging.getLogger(__name__)

_Forked = TypeVar("_Forked")
END_GRACE = 5.0  # seconds for a unit's SIGKILLed leftovers to die (no later than the stop's)


class UnitScope:
    """One unit instance inside a containment (see the module docstring)."""

    def __init__(
        self,
        unit: str,
        cgroup: _cgroup.Cgroup | None,
        records: Records,
        rescan: Callable[[ProcessTable | None], None] | None = None,
        *,
        fork_off_loop: bool = False,
        spawner: Spawner | None = None,
    ) -> None:
        self.unit = unit
        self.cgroup = cgroup
        self._fork_off_loop = fork_off_loop  # see fork_inside
        self._spawner = spawner  # see spawn_inside
        self._records = records
        # without a cgroup: ask for a look that records the orphans the unit just made
        self._rescan = rescan
        self.pid: int | None = None  # the unit's process while it runs
        self.contained = False  # its process is in the unit's cgroup (seen after the fork)
        self.killed = False  # its cgroup was ended and is still there (see end)
        self._cloned: int | None = None  # the PID the spawner just cloned into it

    @property
    def running(self) -> bool:
        return self.pid is not None

    async def spawn_inside(self, fork: Callable[[], Reapable], request: SpawnRequest) -> Reapable:
        """The unit's process, born in the unit's cgroup: from the containment's spawner
        when it is ready (``_spawner``: nobody moves), else ``fork()`` from inside the
        cgroup (:meth:`fork_inside`). ``request`` is what ``fork`` starts."""
        spawner = self._spawner
        if self.cgroup is None or spawner is None or not spawner.ready or self.killed:
            return await self.fork_inside(fork)
        if not self.cgroup.exists():  # removed after an end that left something in it
            try:
                await self._off_loop(self.cgroup.create)
            except OSError:  # the move says why, and starts the unit where we are
                return await self.fork_inside(fork)
        try:
            cloned = await spawner.spawn(*request, cgroup=self.cgroup)
        except SpawnerFailed as failed:
            log.info("%s: %s; forking from its cgroup", self.unit, failed)
            if failed.unknown:  # a process it may have started there is nobody's
                with contextlib.suppress(OSError):
                    await self._off_loop(self.cgroup.kill)
            return await self.fork_inside(fork)
        self._cloned = cloned.pid  # born there: see started
        return cloned

    async def _off_loop(self, call: Callable[[], object]) -> None:
        """``call()`` where this supervisor forks (a worker thread for ``ddsup start``)."""
        if self._fork_off_loop:
            await trio.to_thread.run_sync(call)
        else:
            call()

    async def fork_inside(self, fork: Callable[[], _Forked]) -> _Forked:
        """``fork()`` (it forks the unit's process) while this process sits in the unit's
        cgroup, then back to its own leaf beside it (``_cgroup.inside``): the child is born
        inside the cgroup, so nothing it forks can start outside it.

        The supervisor moves, not the child: a child that moves itself needs a
        ``preexec_fn``, and with one ``subprocess`` forks (copying our page tables and
        running Python in the child) instead of vforking, several times the CPU per start.

        With ``fork_off_loop`` (``ddsup start``, whose loop serves the whole run: every
        agent's channel, the lane feed, the operator) the cgroup's ``mkdir``, the two
        moves and the fork run in a worker thread: each of the three takes the kernel's
        cgroup mutex, which other processes' moves hold through RCU grace periods: while
        many agents on one kernel move, ``ddsup start``'s loop would wait in
        ``cgroup_mkdir`` for hundreds of milliseconds, and every lane event with it.
        Other tasks run meanwhile; none forks, as ``inside`` needs: a unit's
        fork holds the registry's lock around this, and so does every other fork of a
        running supervisor (``fork_lock``). A node agent forks in one step of its loop,
        which serves its own node only: there the thread costs more than it saves (many
        agents forking from threads delay their lanes' ready events). Without a cgroup the fork stays on the loop (a vfork:
        the loop waits only for the child's exec). When the move in fails (logged), the
        child starts where we are and :meth:`started` finds it not contained.
        """
        if self.cgroup is None:
            return fork()
        home = self.cgroup.parent.child(_cgroup.SUPERVISOR_LEAF)  # <own>/supervisor
        if self._fork_off_loop:
            refused, forked = await trio.to_thread.run_sync(_fork_inside, self.cgroup, home, fork)
        else:
            refused, forked = _fork_inside(self.cgroup, home, fork)
        if refused is not None:
            log.warning("%s: no cgroup of its own (%s): %s", self.unit, self.cgroup.path, refused)
        return forked

    def started(self, pid: int) -> None:
        """The unit's process ``pid`` runs: record it, and whether its cgroup holds it.

        A process in the unit's cgroup cannot take a descendant out of it (short of a
        privileged move), so :meth:`end` ends all of it: the stop needs no pass over
        ``/proc`` for escaped descendants (``ChildProcess.stop`` skips those when
        ``contained``). The move into the cgroup can fail: then it is not. One the
        spawner cloned into it is there, as ``clone3`` said: no look at the cgroup.
        """
        self.pid = pid
        cloned, self._cloned = self._cloned, None
        self.contained = self.cgroup is not None and (pid == cloned or self.cgroup.holds(pid))
        start = _proc.start_time(pid)
        if start is not None:
            self._records.add([_registry.Entry(pid, start, self.unit)])

    async def end(self, table: ProcessTable | None = None) -> list[int]:
        """End what the unit left (its process has been stopped): the PIDs ended.
        ``table``: a process table read after the process exited, if the stop read one
        (the scan that records what it orphaned then needs no pass of its own).

        An empty cgroup is kept for the unit's next start; one that held something is
        ended (SIGKILL, race-free against forks) and removed once empty: ending it marks
        it (v1 ``pids.max``; v2 a kill count that a clone into it compares with the
        spawner's cgroup's, and the clone is killed: Linux 6.18). Each step that need not
        wait for the kernel's cgroup lock runs on the event loop: on a busy node a worker
        thread's two wake-ups cost far more than the read, on the way from a crash to its
        restart.

        What it SIGKILLed gets ``END_GRACE`` in all to die, on their pidfds and then on the
        cgroup (a fork in flight): the unit's restart waits for this, and a leftover the
        kernel holds (an engine in uninterruptible sleep) would otherwise hold it twice.
        """
        self.pid = None
        self.contained = False
        pidfds: list[int] = []
        members = [] if self.cgroup is None else _left_in(self.cgroup)
        if members:
            assert self.cgroup is not None
            pidfds += [fd for fd in map(pin_now, members) if fd is not None]
            self.killed = True  # until it is removed
            with contextlib.suppress(OSError):
                await trio.to_thread.run_sync(self.cgroup.kill)
        pinned = _registry.kill_entries(self._records.of(self.unit))
        # the others are gone: a crash loop does not pile them up (killed ones go next time)
        self._records.forget(self.unit, but=frozenset(entry for entry, _fd in pinned))
        pidfds += [fd for _entry, fd in pinned]
        deadline = trio.current_time() + END_GRACE
        await wait_pidfds(pidfds, END_GRACE)
        ended = sorted({*members, *(entry.pid for entry, _fd in pinned)})
        if members:
            assert self.cgroup is not None
            left = deadline - trio.current_time()
            gone = await emptied(self.cgroup, left) if left > 0 else not self.cgroup.populated()
            if gone:
                with contextlib.suppress(OSError):
                    self.killed = not await trio.to_thread.run_sync(self.cgroup.remove)
            else:
                log.warning("%s: processes left in %s after SIGKILL", self.unit, self.cgroup.path)
        if ended:
            log.info("%s: ended %d process(es) it left: %s", self.unit, len(ended), ended)
        if self._spawner is not None:
            self._spawner.want()  # a restart may follow: it should not wait for a move
        if self._rescan is not None:
            # its process died: what it orphaned is ours now (a subreaper's child until it
            # dies), to record soon; not awaited, so a restart does not wait for the pass
            self._rescan(table)
        return ended


def _left_in(cgroup: _cgroup.Cgroup) -> list[int]:
    """The processes in ``cgroup``, read on the event loop (as :meth:`UnitScope.started`
    reads them: no lock of the kernel's is taken, and a thread would add its two
    wake-ups to every restart); with v2, one look at ``cgroup.events`` when it is empty,
    as it is after most ends."""
    if cgroup.kind is _cgroup.CgroupKind.V2 and not cgroup.populated():
        return []
    return cgroup.members()


def _fork_inside(
    target: _cgroup.Cgroup, home: _cgroup.Cgroup, fork: Callable[[], _Forked]
) -> tuple[OSError | None, _Forked]:
    """``fork()`` from inside ``target`` (a worker thread's part of ``fork_inside``)."""
    with _cgroup.inside(target, home) as refused:
        return refused, fork()


def pin_now(pid: int) -> int | None:
    """A pidfd on ``pid`` as it is now (None when it is gone or a zombie)."""
    start = _proc.start_time(pid)
    return None if start is None else _registry.pin(_registry.Entry(pid, start, "?"))


async def wait_pidfds(fds: list[int], timeout: float) -> bool:  # noqa: ASYNC109
    """Until every pidfd's process has ended (a pidfd turns readable), or ``timeout``;
    closes the fds. True when all ended."""
    try:
        with trio.move_on_after(timeout):
            for fd in fds:
                await trio.lowlevel.wait_readable(fd)
            return True
        return False
    finally:
        for fd in fds:
            os.close(fd)


async def emptied(cgroup: _cgroup.Cgroup, timeout: float) -> bool:  # noqa: ASYNC109
    """Until no live process is left in ``cgroup``. The members we saw were waited for
    on pidfds; this catches one forked in flight (bounded poll: v1 has no event). A v2
    cgroup says it in one read of ``cgroup.events``, on the loop; a v1 one is a read of
    every member's state, in a thread."""
    with trio.move_on_after(timeout):
        while await _populated(cgroup):  # noqa: ASYNC110 (bounded; see above)
            await trio.sleep(0.005)
        return True
    return False


async def _populated(cgroup: _cgroup.Cgroup) -> bool:
    if cgroup.kind is _cgroup.CgroupKind.V2:
        return cgroup.populated()
    return await trio.to_thread.run_sync(cgroup.populated)
