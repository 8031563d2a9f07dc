"""Containment: every no-orphan layer a supervisor needs, opened once, closed once.

``ddsup start`` and each node agent open one :func:`open_containment` around all their
work. Opening it makes this process a child subreaper (orphans of our units become our
children) and starts the sentinel (it ends the run if we die uncleanly), unless another
supervisor's sentinel on this machine already covers us (``covered_by``: a simulated
node's agent, whose ``ddsup start`` runs on the same machine, ends the whole run there
if it dies, and ends a dead agent's share itself: ``ddsup.controller._agents``); where the node
offers a writable cgroup (``_cgroup``) it creates the run's cgroup and moves this
process into it, and every unit spawned with ``spawn(..., unit=NAME)`` starts in a
cgroup of its own (with v2, once a unit's process has ended, cloned there by the
containment's spawner: ``_spawner``); and it opens this supervisor's registry of (PID, start time) of the
processes its units have (``_registry``), which it fills as the run goes:

- when a unit's process starts (its PID, at once);
- without a cgroup, every ``SCAN_INTERVAL`` while units run: one pass over ``/proc``
  (shared with concurrent stops) for each unit's descendants and for orphans adopted by
  us. With a cgroup there is no periodic scan: nothing a unit forks leaves its cgroup
  (short of a privileged move), and every layer that ends the registry's entries ends
  the cgroups first, so a scan would only record what the cgroup already holds;
- without a cgroup, also when a unit's process has stopped: what it orphaned is ours
  (asked for, not awaited: the unit's restart does not wait for the pass).

When a unit's process stops (``ChildProcess.stop``), whatever it left is ended with it
(:meth:`UnitScope.end`): its cgroup, and the registry entries of that unit. When the
containment closes, everything left on this node is ended: the units' cgroups, every
adopted orphan, every registry entry, and (``ddsup start`` only) every process tagged
with the invocation id; the cgroup directories are removed, and the sentinel released.

Which layers are active, and why one is not, is :attr:`Containment.layers`, also written
to ``<state dir>/containment/<supervisor>.json`` for status and ``ddsup cleanup``.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator, Collection
from contextlib import asynccontextmanager

import trio

from ddsup.process import _cgroup, _proc, _registry
from ddsup.process._layers import Layers
from ddsup.process._managed import managed_children
from ddsup.process._opening import CGROUP_ENV as CGROUP_ENV
from ddsup.process._opening import OpenedLayers, open_layers
from ddsup.process._spawner import Spawner
from ddsup.process._subreaper import reap_adopted_children
from ddsup.process._sweep import find_run_processes, sweep
from ddsup.process._table import ProcessTable, process_table
from ddsup.process._unit_scope import UnitScope, emptied, pin_now, wait_pidfds

log = logging.getLogger(__name__)

SCAN_INTERVAL = 2.0  # seconds between looks at the units' trees (docs/no-orphans.md: cost)
_CLOSE_GRACE = 5.0  # seconds for SIGKILLed leftovers to die at the end (reported if not)
_CURRENT: trio.lowlevel.RunVar[Containment | None] = trio.lowlevel.RunVar(
    "ddsup_containment", default=None
)


def current_containment() -> Containment | None:
    """The containment open in this trio run, if any (``spawn(unit=…)`` uses it)."""
    return _CURRENT.get()


class Containment:
    """The no-orphan layers of one supervisor (see the module docstring), once opened
    (:func:`~ddsup.process._opening.open_layers`)."""

    def __init__(self, opened: OpenedLayers) -> None:
        assert opened.layers is not None, "open_layers did not finish"
        self.invocation_id = opened.invocation_id
        self.name = opened.name
        self.root = opened.root
        self.layers: Layers = opened.layers
        self._sentinel = opened.sentinel
        self._placement = opened.placement
        self._own = opened.own
        self._records = opened.records
        self._records_fd = opened.records_fd
        self._scopes: dict[str, UnitScope] = {}
        self._spawner = _spawner_for(self._own)
        self._scan_wanted = trio.Event()  # set: a unit stopped, what it orphaned is ours
        self._scan_table: ProcessTable | None = None  # read after that unit's exit, if any
        self.survivors: list[int] = []

    # --- units --------------------------------------------------------------------------
    def scope(self, unit: str) -> UnitScope:
        """The share of ``unit`` (an instance name): its cgroup and its registry entries."""
        scope = self._scopes.get(unit)
        if scope is None:
            if self._own is not None:
                cgroup = self._own.child(_cgroup.UNIT_PREFIX + unit)
                scope = UnitScope(
                    unit, cgroup, self._records, fork_off_loop=self.root, spawner=self._spawner
                )
            else:
                scope = UnitScope(unit, None, self._records, rescan=self.scan_soon)
            self._scopes[unit] = scope
        return scope

    async def _scan_forever(self) -> None:
        """Without a cgroup, record what the units have, every SCAN_INTERVAL while any
        runs (no event exists for "a process forked"; the interval bounds the cost, see
        the docs), and at once when a unit's process stopped (:meth:`scan_soon`). With a
        cgroup, nothing: the cgroup holds all of it (module docstring)."""
        if self._own is not None:
            return
        while True:
            with trio.move_on_after(SCAN_INTERVAL):
                await self._scan_wanted.wait()
            wanted, self._scan_wanted = self._scan_wanted.is_set(), trio.Event()
            table, self._scan_table = self._scan_table, None
            if wanted or any(scope.running for scope in self._scopes.values()):
                await self.scan(table)

    def scan_soon(self, table: ProcessTable | None = None) -> None:
        """Ask for a scan now, without waiting for it: a unit's process stopped, and what
        it orphaned became our child (we are its subreaper, so it stays ours and the scan
        finds it), but its restart must not wait for a pass over every process. ``table``,
        read after that exit by the unit's stop, spares the scan a pass of its own; when
        two stops ask before the scan ran, it reads a fresh one (either table may predate
        the other unit's exit)."""
        self._scan_table = None if self._scan_wanted.is_set() else table
        self._scan_wanted.set()

    async def scan(self, table: ProcessTable | None = None) -> None:
        """Record every process of the units now (one look; see the module docstring),
        from ``table`` when given. With a cgroup, nothing to record: the cgroup holds
        them all."""
        if self._own is not None:
            return
        scopes = [s for s in self._scopes.values() if s.running]
        if table is None:
            table = await process_table()
        exclude = frozenset(managed_children().pids) | self._own_helpers()
        found = await trio.to_thread.run_sync(
            _tree_members, scopes, table.children, exclude, self._records.seen
        )
        self._records.add(found)

    def _own_helpers(self) -> frozenset[int]:
        return frozenset() if self._sentinel is None else frozenset({self._sentinel.pid})

    # --- closing ------------------------------------------------------------------------
    async def _close(self) -> None:
        """End everything left on this node, remove the cgroups, release the sentinel."""
        pidfds: list[int] = []
        if self._placement is not None:
            with contextlib.suppress(OSError):
                self._placement.base.move(os.getpid())  # out, so our subtree can be ended
        doomed = self._doomed_cgroups()
        for cgroup in doomed:
            with contextlib.suppress(OSError):
                await trio.to_thread.run_sync(cgroup.kill)
        table = await process_table()
        adopted = _adopted(table.children, frozenset(managed_children().pids) | self._own_helpers())
        pidfds += [fd for fd in map(pin_now, adopted) if fd is not None]
        pidfds += [fd for _entry, fd in _registry.kill_entries(self._records.of(None))]
        _registry.kill_pinned(pidfds)
        if self.root:
            self.survivors += await sweep_until_gone(self.invocation_id, timeout=_CLOSE_GRACE)
        await wait_pidfds(pidfds, _CLOSE_GRACE)
        for cgroup in doomed:
            if not await emptied(cgroup, _CLOSE_GRACE):
                self.survivors += await trio.to_thread.run_sync(cgroup.members)
            with contextlib.suppress(OSError):
                await trio.to_thread.run_sync(cgroup.remove)
        if self._placement is not None and not self.root:
            # the run's cgroup on this node, once no other supervisor of the run has a
            # subtree in it: on an agent's own node nobody else removes it, and an empty
            # directory left there would keep Slurm from removing its step's cgroup
            with contextlib.suppress(OSError):
                os.rmdir(self._placement.run.path)
        if self._records.file is not None:
            self._records.file.close()
        if self._sentinel is not None:
            self._sentinel.close()
        if self._records_fd is not None:
            os.close(self._records_fd)
            self._records_fd = None

    def _doomed_cgroups(self) -> list[_cgroup.Cgroup]:
        """At close: the whole run's cgroup on this node for ``ddsup start`` (agents
        started here live inside it), else this supervisor's subtree."""
        if self._placement is None or self._own is None:
            return []
        return [self._placement.run if self.root else self._own]


def _spawner_for(own: _cgroup.Cgroup | None) -> Spawner | None:
    """A spawner for a cgroup v2 subtree (``_spawner``: v1 has no clone into a cgroup)."""
    if own is None or own.kind is not _cgroup.CgroupKind.V2:
        return None
    return Spawner(own.child(_cgroup.SUPERVISOR_LEAF))


def _adopted(children: dict[int, list[int]], exclude: frozenset[int]) -> list[int]:
    """Orphans reparented to us (children we did not start, outside our session) and
    everything below them: they belong to the run."""
    own_session = os.getsid(0)
    found: list[int] = []
    pending = []
    for pid in children.get(os.getpid(), ()):
        with contextlib.suppress(ProcessLookupError):
            if pid not in exclude and os.getsid(pid) != own_session:
                pending.append(pid)
    while pending:
        pid = pending.pop()
        found.append(pid)
        pending += children.get(pid, ())
    return found


def _tree_members(
    scopes: list[UnitScope],
    children: dict[int, list[int]],
    exclude: frozenset[int],
    seen: dict[int, _registry.Entry],
) -> list[_registry.Entry]:
    """Each unit's descendants, and adopted orphans (attributed to the unit that had them
    before, when we saw it; else to none: they are ended at close)."""
    found = []
    for scope in scopes:
        pending = list(children.get(scope.pid or -1, ()))
        while pending:
            pid = pending.pop()
            pending += children.get(pid, ())
            start = _proc.start_time(pid)
            if start is not None:
                found.append(_registry.Entry(pid, start, scope.unit))
    attributed = {e.pid for e in found}
    for pid in _adopted(children, exclude):
        start = _proc.start_time(pid)
        if start is None or pid in attributed:
            continue
        known = seen.get(pid)
        unit = known.unit if known is not None and known.start_time == start else "?"
        found.append(_registry.Entry(pid, start, unit))
    return found


@asynccontextmanager
async def open_containment(
    invocation_id: str,
    *,
    state_dir: str | os.PathLike[str] | None,
    name: str,
    root: bool,
    cgroup: str | None = None,
    covered_by: str | None = None,
    opened: OpenedLayers | None = None,
    state_dir_fd: int | None = None,
) -> AsyncIterator[Containment]:
    """Open the no-orphan layers of one supervisor (``name``: ``controller`` or
    ``agent-<node>``; ``root``: this is ``ddsup start``); see the module docstring.

    ``covered_by`` names a supervisor on this machine whose sentinel covers this one
    (``controller``, for a simulated node's agent): when its layers say so, no sentinel
    of our own is started (a process and ~14 MiB each, 128 of them at 128 simulated
    nodes); whoever covers us must then end our share if we die (``end_on_this_node``
    with ``names=[name]``).

    ``cgroup`` picks the hierarchy (``auto``, ``off``, ``v2``, ``v1-freezer``,
    ``v1-pids``; default ``$DDSUP_CGROUP`` or ``auto``). No layer's absence fails: it is
    named, with the reason, in :attr:`Containment.layers`.

    ``state_dir_fd``: the state directory, held open by whoever created or checked it;
    the records are then made and kept through it, never through ``state_dir``'s path
    (which then only names them in messages).

    ``opened``: the layers, already opened by :func:`~ddsup.process._opening.open_layers`
    before trio was imported (``ddsup start``'s head start); the other arguments are then
    not used. From here on they are this containment's, closed with it.
    """
    if opened is None:
        opened = open_layers(
            invocation_id,
            state_dir=state_dir,
            name=name,
            root=root,
            cgroup=cgroup,
            covered_by=covered_by,
            state_dir_fd=state_dir_fd,
        )
    containment = Containment(opened)
    token = _CURRENT.set(containment)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(reap_adopted_children)
            nursery.start_soon(containment._scan_forever)
            if containment._spawner is not None:
                nursery.start_soon(containment._spawner.run)
            yield containment
            nursery.cancel_scope.cancel()
    finally:
        _CURRENT.reset(token)
        with trio.CancelScope(shield=True):
            await containment._close()


# --- the sweep at the end of a run, from inside the supervisor's trio loop ----------------

_SWEEP_POLL = 0.02


async def sweep_until_gone(
    invocation_id: str,
    *,
    timeout: float = 5.0,  # noqa: ASYNC109 (the engine's API: a bound that reports survivors)
    exclude: Collection[int] = (),
) -> list[int]:
    """SIGKILL the run's processes until none is left or ``timeout``; the survivors."""
    with trio.move_on_after(timeout):
        # no event exists for "a process that is not our child died": bounded poll
        while sweep(invocation_id, exclude=exclude):  # noqa: ASYNC110
            await trio.sleep(_SWEEP_POLL)
        return []
    return find_run_processes(invocation_id, exclude=exclude)
