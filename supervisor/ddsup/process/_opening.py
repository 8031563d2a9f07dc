"""Opening a supervisor's no-orphan layers, before any child: the standard library only.

:func:`open_layers` is what opening a containment does first, and all of it is
synchronous: this process becomes a child subreaper, its registry file is opened, the
sentinel starts (unless another supervisor's covers us), and the run's cgroup is placed
with this process inside it. :class:`~ddsup.process._containment.Containment` then owns
the result and adds what needs trio (the reaper, the scans, the close).

Apart from ``_containment`` because ``ddsup start`` opens its layers before it imports
trio (``controller._head_start``): the agents' ``srun`` is spawned inside them, so the sentinel
covers it from its first instant, and trio's import runs beside the agents' start-up.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass, field

from ddsup.process import _cgroup, _proc, _registry
from ddsup.process._layers import Layers
from ddsup.process._sentinel import Sentinel, start_sentinel
from ddsup.process._subreaper_flag import become_subreaper, is_subreaper

# --- what one supervisor has seen of its units' processes, as kept in its registry file ---
# Here, not in ``_unit_scope`` (which ends a unit's share with trio), because opening a
# containment fills it, and ``ddsup start`` opens its containment before it imports trio
# (``controller._head_start``).

log = logging.getLogger(__name__)


@dataclass
class Records:
    """What one supervisor has seen: PID → entry (the newest process with that PID),
    appended to its registry file as it is seen."""

    file: _registry.RegistryFile | None
    seen: dict[int, _registry.Entry] = field(default_factory=dict)

    def add(self, entries: list[_registry.Entry]) -> None:
        new = [e for e in entries if self.seen.get(e.pid) != e]
        for entry in new:
            self.seen[entry.pid] = entry
        if new and self.file is not None:
            try:
                self.file.add(new)
            except OSError as err:  # a full or vanished disk must not end the run
                log.warning("cannot write the registry %s: %s", self.file.path, err)

    def of(self, unit: str | None) -> list[_registry.Entry]:
        """The entries of ``unit`` (None: every entry)."""
        return [e for e in self.seen.values() if unit is None or e.unit == unit]

    def forget(self, unit: str, *, but: frozenset[_registry.Entry] = frozenset()) -> None:
        """Drop ``unit``'s entries from memory (the file keeps them), except ``but``."""
        self.seen = {p: e for p, e in self.seen.items() if e.unit != unit or e in but}


CGROUP_ENV = "DDSUP_CGROUP"  # auto | off | v2 | v1-freezer | v1-pids


@dataclass
class OpenedLayers:
    """One supervisor's layers as :func:`open_layers` left them (module docstring)."""

    invocation_id: str
    name: str
    root: bool
    records_dir: str | None  # where the records are, for messages
    records_fd: int | None = None  # the ``containment`` directory, held (``_registry``)
    records: Records = field(default_factory=lambda: Records(None))
    sentinel: Sentinel | None = None
    placement: _cgroup.Placement | None = None
    own: _cgroup.Cgroup | None = None  # this supervisor's subtree of the run's cgroup
    layers: Layers | None = None


def open_layers(
    invocation_id: str,
    *,
    state_dir: str | os.PathLike[str] | None,
    name: str,
    root: bool,
    cgroup: str | None = None,
    covered_by: str | None = None,
    state_dir_fd: int | None = None,
) -> OpenedLayers:
    """Open the layers (``open_containment`` says what each argument means)."""
    choice = cgroup or os.environ.get(CGROUP_ENV) or "auto"
    directory = None if state_dir is None else os.path.join(os.fspath(state_dir), "containment")
    opened = OpenedLayers(invocation_id, name, root, directory)
    become_subreaper()
    registry_reason = _open_records(opened, state_dir, state_dir_fd)
    sentinel_of = _covering_sentinel(opened, covered_by)
    if sentinel_of is None:
        opened.sentinel = start_sentinel(invocation_id, opened.records_fd, name, root=root)
    cgroup_reason = _open_cgroup(opened, choice)
    opened.layers = Layers(
        supervisor=name,
        pid=os.getpid(),
        machine=_registry.Machine.here(),
        subreaper=is_subreaper(),
        sentinel=None if opened.sentinel is None else opened.sentinel.pid,
        sentinel_of=sentinel_of,
        registry=None if opened.records.file is None else opened.records.file.path,
        cgroup=opened.own,
        run_cgroup=opened.placement.run if opened.placement else None,
        cgroup_reason=cgroup_reason,
        registry_reason=registry_reason,
        tag_sweep=root,
    )
    if opened.records_fd is not None:
        with contextlib.suppress(OSError):
            _registry.write_layers(opened.records_fd, name, opened.layers.to_json())
    return opened


def _covering_sentinel(opened: OpenedLayers, covered_by: str | None) -> str | None:
    """``covered_by`` when its sentinel covers us: it wrote its layers into our registry
    directory (so its sentinel ends our records and cgroups too) from this machine, and
    its sentinel is alive. None: we start our own."""
    if covered_by is None or opened.records_fd is None:
        return None
    data = _registry.supervisor_here(opened.records_fd, covered_by, _registry.Machine.here())
    sentinel = None if data is None else data.get("sentinel")
    if isinstance(sentinel, int) and not _proc.is_dead(sentinel):
        return covered_by
    return None


def _open_records(
    opened: OpenedLayers, state_dir: str | os.PathLike[str] | None, state_dir_fd: int | None
) -> str | None:
    """Hold the ``containment`` directory (through ``state_dir_fd``, the state directory
    its creator holds, when given) and open this supervisor's registry file in it."""
    if opened.records_dir is None or state_dir is None:
        return "no state directory"
    try:
        opened.records_fd = _registry.records_directory(
            os.fspath(state_dir) if state_dir_fd is None else state_dir_fd
        )
        path = os.path.join(opened.records_dir, f"{opened.name}.pids")
        opened.records = Records(_registry.RegistryFile(opened.records_fd, opened.name, path))
    except OSError as err:
        return f"cannot write {opened.records_dir}: {err.strerror}"
    return None


def _open_cgroup(opened: OpenedLayers, choice: str) -> str | None:
    """Place the run's cgroup, keep the sentinel outside it, move ourselves in."""
    try:
        placement = _cgroup.place(opened.invocation_id, choice)
    except _cgroup.Unavailable as err:
        return str(err)
    own = placement.run.child(opened.name)
    try:
        if opened.sentinel is not None:
            placement.base.move(opened.sentinel.pid)  # it must survive the run's cgroup
        own.child(_cgroup.SUPERVISOR_LEAF).create()
        own.child(_cgroup.SUPERVISOR_LEAF).move(os.getpid())
    except OSError as err:
        with contextlib.suppress(OSError):
            own.remove()
            placement.run.remove()
        return f"{placement.run.kind.value}: cannot move processes into {own.path}: {err.strerror}"
    opened.placement, opened.own = placement, own
    return None
