"""Ending a run's processes on this node without its supervisor: the sentinel's and
``ddsup cleanup``'s work.

Every layer that needs no live supervisor, strongest first: the cgroups the supervisors
recorded (everything in them, whatever it did to its environment, session or parent),
the (PID, start time) registry, and the sweep by invocation id. The cgroup directories
are removed once empty. Nothing that is not named ``ddsup-<invocation id>``, recorded
with its start time, or tagged with the id is ever touched.

Standard library only: the sentinel (``python -I -S``) imports this module.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field

if __package__:
    from ddsup.process import _cgroup, _proc, _registry, _sweep
else:  # imported by the sentinel program, which put this folder on sys.path
    import _cgroup  # type: ignore[import-not-found,no-redef,unused-ignore]
    import _proc  # type: ignore[import-not-found,no-redef,unused-ignore]
    import _registry  # type: ignore[import-not-found,no-redef,unused-ignore]
    import _sweep  # type: ignore[import-not-found,no-redef,unused-ignore]

_REGISTRY_WAIT = 2.0  # seconds for SIGKILLed registry entries to die before the sweep


@dataclass
class Ended:
    """What an ending did: PIDs hit by each layer, and what is still alive."""

    cgroup: set[int] = field(default_factory=set)
    registry: set[int] = field(default_factory=set)
    tag: set[int] = field(default_factory=set)
    survivors: list[int] = field(default_factory=list)
    cgroups_left: list[str] = field(default_factory=list)

    @property
    def hit(self) -> set[int]:
        return self.cgroup | self.registry | self.tag


def recorded_cgroups(
    layers: list[dict[str, object]], invocation_id: str, *, whole_run: bool
) -> list[_cgroup.Cgroup]:
    """The cgroups named in supervisors' layers files: each supervisor's own subtree, or
    the run's cgroup on this node when ``whole_run``; only ``ddsup-<invocation id>``."""
    found: list[_cgroup.Cgroup] = []
    for data in layers:
        recorded = data.get("cgroup")
        if not isinstance(recorded, dict):
            continue
        try:
            kind = _cgroup.CgroupKind(recorded.get("kind"))
        except ValueError:
            continue
        path = recorded.get("run" if whole_run else "own")
        if not isinstance(path, str):
            continue
        cgroup = _cgroup.Cgroup(kind, path)
        if _cgroup.is_run_cgroup(cgroup, invocation_id) and cgroup not in found:
            found.append(cgroup)
    return found


def end_on_this_node(
    invocation_id: str,
    directory: _registry.Directory | None,
    *,
    names: list[str] | None = None,
    extra_cgroups: list[_cgroup.Cgroup] | None = None,
    timeout: float = _sweep.SWEEP_SECONDS,
    agent: str | None = None,
) -> Ended:
    """End the run's processes on this node.

    ``directory`` is the run's ``containment`` directory (None: unknown): the descriptor
    its supervisor held (``_registry.records_directory``), so that what is read there is
    what the run's supervisors wrote, whatever was put at its path since; ``names`` the
    supervisors whose records to use (None: every supervisor that ran on this machine,
    and then the run's whole cgroup). ``extra_cgroups`` are ended too (``cleanup
    --invocation`` finds them by name). ``agent``: the tag sweep ends only processes
    tagged ``DDSUP_AGENT=<agent>`` (a node agent's sentinel: what that agent started).
    """
    ended = Ended()
    machine = _registry.Machine.here()
    supervisors = [] if directory is None else _registry.supervisors_here(directory, machine)
    if names is not None:
        supervisors = [(name, data) for name, data in supervisors if name in names]
    layers = [data for _name, data in supervisors]
    cgroups = recorded_cgroups(layers, invocation_id, whole_run=names is None)
    cgroups += [c for c in extra_cgroups or () if c not in cgroups]
    mine = _own_cgroup_paths()
    for cgroup in cgroups:
        if any(path == cgroup.path or path.startswith(cgroup.path + os.sep) for path in mine):
            continue  # never end the cgroup we are in: the sweeps below handle it
        with contextlib.suppress(OSError):
            ended.cgroup.update(cgroup.kill())
    entries = []
    for name, _data in supervisors:
        assert directory is not None
        entries += _registry.read_entries(directory, name)
    pinned = _registry.kill_entries(entries)
    ended.registry.update(entry.pid for entry, _fd in pinned)
    _registry.wait_pidfds([fd for _entry, fd in pinned], _REGISTRY_WAIT)
    hit, ended.survivors = _sweep.sweep_until_gone_sync(invocation_id, timeout=timeout, agent=agent)
    ended.tag.update(hit)
    for cgroup in cgroups:
        with contextlib.suppress(OSError):
            if not (cgroup.wait_empty(timeout) and cgroup.remove()):
                ended.cgroups_left.append(cgroup.path)
    return ended


def _own_cgroup_paths() -> list[str]:
    """Directories of the cgroups this process is in, in every mounted hierarchy."""
    paths = []
    own = _proc.read_cgroups()
    for mount in _proc.cgroup_mounts():
        keys = [""] if mount.version == 2 else sorted(mount.controllers & set(own))
        for key in keys:
            if key in own:
                paths.append(_cgroup.directory_of(mount, own[key]))
    return paths
