"""Control groups: the one no-orphan layer that needs no mark on the process at all.

A process can clear its environment, call ``setsid``, retitle itself and lose its parent,
and it is still in the cgroup it was forked in: only a privileged move takes it out. So
wherever the node lets us create cgroups, a run gets one per node (``ddsup-<invocation
id>``), each supervisor a subtree in it, and each unit instance a cgroup of its own::

    <where we were>/ddsup-<invocation id>/        the run on this node
        controller/supervisor                     ddsup start itself
        controller/u-worker                       a unit instance and all it forks
        agent-node0/supervisor                    a node agent
        agent-node0/u-lane@0

Ending a cgroup is race-free against a process that forks meanwhile: cgroup v2's
``cgroup.kill`` (Linux ≥ 5.14) kills the whole subtree at once; with a cgroup v1
``freezer`` we freeze the subtree, SIGKILL every member and thaw it; with only a v1
``pids`` hierarchy we set ``pids.max`` to 0 (forks fail) and SIGKILL every member.

Which hierarchy is used (:func:`place`): a writable cgroup v2 (a delegated subtree, or
any as root), else a v1 ``freezer``, else a v1 ``pids`` hierarchy, or none. A v1
hierarchy is used only while we sit at its root: a v1 cgroup below the root is someone
else's (Slurm's ``proctrack/cgroup``, systemd), and their tools read only their own
cgroup's members, so nesting ours there would hide processes from them.

Standard library only: the sentinel (``python -I -S``) imports this module.
"""

from __future__ import annotations

import contextlib
import enum
import errno
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass

if __package__:
    from ddsup.process import _proc
else:  # imported by the sentinel program, which put this folder on sys.path
    import _proc  # type: ignore[import-not-found,no-redef,unused-ignore]

RUN_PREFIX = "ddsup-"
SUPERVISOR_LEAF = "supervisor"
UNIT_PREFIX = "u-"
_FREEZE_SECONDS = 1.0  # a task in uninterruptible sleep delays FROZEN; we kill regardless
_POLL = 0.005  # seconds between looks at a freezer state or an emptying v1 cgroup


class CgroupKind(str, enum.Enum):
    """The hierarchy a run's cgroups live in, in order of preference."""

    V2 = "v2"
    FREEZER = "v1-freezer"
    PIDS = "v1-pids"

    @property
    def controller(self) -> str:
        """The key of this hierarchy in ``/proc/PID/cgroup``."""
        return {CgroupKind.V2: "", CgroupKind.FREEZER: "freezer", CgroupKind.PIDS: "pids"}[self]


CHOICES = ("auto", "off", *(kind.value for kind in CgroupKind))


@dataclass(frozen=True)
class Cgroup:
    """One cgroup directory of a given hierarchy."""

    kind: CgroupKind
    path: str

    def child(self, name: str) -> Cgroup:
        return Cgroup(self.kind, os.path.join(self.path, name))

    @property
    def parent(self) -> Cgroup:
        return Cgroup(self.kind, os.path.dirname(self.path))

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind.value, "path": self.path}

    def create(self) -> None:
        """Create this cgroup (and missing parents); existing is fine."""
        os.makedirs(self.path, mode=0o755, exist_ok=True)

    def exists(self) -> bool:
        return os.path.isdir(self.path)

    def open_procs(self) -> int:
        """An fd on ``cgroup.procs``: writing ``0`` to it moves the writer here."""
        return os.open(os.path.join(self.path, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)

    def move(self, pid: int) -> None:
        """Move process ``pid`` (all its threads) into this cgroup."""
        fd = self.open_procs()
        try:
            os.write(fd, str(pid).encode())
        finally:
            os.close(fd)

    def directories(self) -> Iterator[str]:
        """This cgroup's directory and those below it, deepest first."""
        for top, _dirs, _files in os.walk(self.path, topdown=False):
            yield top

    def members(self) -> list[int]:
        """PIDs of every process in this cgroup and below it (v1 and v2 list only a
        directory's own members in ``cgroup.procs``: the subtree is walked)."""
        found: list[int] = []
        for directory in self.directories():
            found += [int(word) for word in _read(directory, "cgroup.procs").split()]
        return found

    def holds(self, pid: int) -> bool:
        """Whether process ``pid`` is in this cgroup (this directory, not below), also once
        it has exited: a zombie is no longer listed in ``cgroup.procs``, but with v2 its
        ``/proc/PID/cgroup`` still names the cgroup it died in (v1 names the root: an
        exited process is then not known to be here, and False is the safe answer)."""
        if pid in self.members():
            return True
        where = _proc.read_cgroups(pid).get(self.kind.controller)
        if where is None:
            return False
        try:
            mount = _mount_for(self.kind)
        except Unavailable:
            return False
        return directory_of(mount, where) == os.path.normpath(self.path)

    def populated(self) -> bool:
        """Whether a live process is in this subtree (zombies do not count)."""
        if self.kind is CgroupKind.V2:
            try:
                with open(os.path.join(self.path, "cgroup.events")) as handle:
                    return "populated 1" in handle.read()
            except OSError:
                return False
        return any(not _proc.is_dead(pid) for pid in self.members())

    def kill(self) -> list[int]:
        """SIGKILL every process in this subtree, forks in flight included; the members
        seen (they may still be dying when this returns). Gone already is not an error."""
        if not self.exists():
            return []
        members = self.members()
        if os.getpid() in members:  # a freezer would freeze us, cgroup.kill kill us
            raise RuntimeError(f"{self.path} holds this process: it cannot end it")
        try:
            if self.kind is CgroupKind.V2:
                _write(self.path, "cgroup.kill", "1")
            elif self.kind is CgroupKind.FREEZER:
                members = self._freeze_and_kill()
            else:
                _write(self.path, "pids.max", "0")  # hierarchical: no fork below succeeds
                members = _kill_all(self.members())
        except FileNotFoundError:
            return []
        return members

    def _freeze_and_kill(self) -> list[int]:
        _write(self.path, "freezer.state", "FROZEN")
        deadline = time.monotonic() + _FREEZE_SECONDS
        while _read(self.path, "freezer.state") != "FROZEN" and time.monotonic() < deadline:
            time.sleep(_POLL)  # FREEZING → FROZEN has no event we can wait on
        try:
            return _kill_all(self.members())  # frozen: nobody forks while we list and kill
        finally:
            _write(self.path, "freezer.state", "THAWED")  # the pending SIGKILLs now land

    def wait_empty(self, timeout: float) -> bool:
        """Until no live process is left in the subtree (bounded poll: no portable event
        for it in v1; the asynchronous supervisor waits on pidfds instead)."""
        deadline = time.monotonic() + timeout
        while self.populated():
            if time.monotonic() >= deadline:
                return False
            time.sleep(_POLL)
        return True

    def remove(self) -> bool:
        """Remove the subtree's directories (empty ones only); True when none is left."""
        for directory in self.directories():
            try:
                os.rmdir(directory)
            except FileNotFoundError:
                continue
            except OSError as err:
                if err.errno in (errno.EBUSY, errno.ENOTEMPTY):
                    return False
                raise
        return True


@contextlib.contextmanager
def inside(target: Cgroup, home: Cgroup) -> Iterator[OSError | None]:
    """This process sits in ``target`` for the body, then goes back to ``home``: what the
    body forks is born in ``target``, before it runs an instruction, so nothing it forks
    can start outside it (``UnitScope.fork_inside``).

    Yields None once inside, or the error that kept it out (it then stays where it is).
    Nothing else of this process may fork meanwhile: its child would be born in
    ``target`` too. Every thread of this process moves with it. Staying
    in ``target`` would let its end kill us, so a failed move back is not swallowed: the
    ``home`` directory is made again (it was empty, and may have been removed) and the
    move tried once more. Moves are cheap back to back and cost an RCU grace period after
    a quiet spell: the kernel's cgroup write lock."""
    try:
        target.create()
        target.move(os.getpid())
    except OSError as err:
        yield err
        return
    try:
        yield None
    finally:
        try:
            home.move(os.getpid())
        except OSError:
            home.create()
            home.move(os.getpid())


def _write(directory: str, name: str, value: str) -> None:
    with open(os.path.join(directory, name), "w") as handle:
        handle.write(value)


def _read(directory: str, name: str) -> str:
    try:
        with open(os.path.join(directory, name)) as handle:
            return handle.read().strip()
    except OSError:
        return ""


def _kill_all(pids: list[int]) -> list[int]:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)  # a cgroup member: its PID cannot be a stranger's
    return pids


# --- where a run's cgroups go ---------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    """The run's cgroup on this node, and the cgroup we were in when we made it."""

    base: Cgroup  # where this supervisor was: the sentinel stays (or goes back) here
    run: Cgroup  # <base>/ddsup-<invocation id>


class Unavailable(Exception):
    """No cgroup layer on this node; the message says why (shown in status)."""


def place(invocation_id: str, choice: str = "auto") -> Placement:
    """Find where the run's cgroup goes, create it, and check it can be ended.

    ``choice`` is ``auto`` (v2, else v1 freezer, else v1 pids), ``off``, or one kind.
    Raises :class:`Unavailable` with every reason when no hierarchy will do.
    """
    if choice not in CHOICES:
        raise Unavailable(f"DDSUP_CGROUP={choice!r}: expected one of {', '.join(CHOICES)}")
    if choice == "off":
        raise Unavailable("turned off (DDSUP_CGROUP=off)")
    kinds = list(CgroupKind) if choice == "auto" else [CgroupKind(choice)]
    reasons = []
    for kind in kinds:
        try:
            return _place(kind, invocation_id)
        except Unavailable as err:
            reasons.append(f"{kind.value}: {err}")
    raise Unavailable("; ".join(reasons))


def _place(kind: CgroupKind, invocation_id: str) -> Placement:
    mount = _mount_for(kind)
    own = _proc.read_cgroups().get(kind.controller)
    if own is None:
        raise Unavailable("this process is in no cgroup of that hierarchy")
    current = Cgroup(kind, directory_of(mount, own))
    run_name = RUN_PREFIX + invocation_id
    parts = current.path.split(os.sep)
    if run_name in parts:  # a node agent started by ddsup start: already inside the run
        run = Cgroup(kind, os.sep.join(parts[: parts.index(run_name) + 1]))
        base = run.parent
    else:
        if kind is not CgroupKind.V2 and current.path != os.path.normpath(mount.mount_point):
            raise Unavailable(f"this process is in {own}, someone else's cgroup")
        base, run = current, current.child(run_name)
    try:
        run.create()
    except OSError as err:
        raise Unavailable(f"cannot create {run.path}: {err.strerror}") from err
    if kind is CgroupKind.V2 and not os.path.exists(os.path.join(run.path, "cgroup.kill")):
        with contextlib.suppress(OSError):
            os.rmdir(run.path)
        raise Unavailable("no cgroup.kill (Linux < 5.14)")
    return Placement(base, run)


def _mount_for(kind: CgroupKind) -> _proc.CgroupMount:
    for mount in _proc.cgroup_mounts():
        if mount.version == (2 if kind is CgroupKind.V2 else 1) and (
            kind is CgroupKind.V2 or kind.controller in mount.controllers
        ):
            if not mount.writable:
                raise Unavailable(f"{mount.mount_point} is mounted read-only")
            return mount
    raise Unavailable("not mounted")


def directory_of(mount: _proc.CgroupMount, path: str) -> str:
    """The directory of cgroup ``path`` (as ``/proc/PID/cgroup`` names it) in ``mount``."""
    relative = path[len(mount.root) :] if path.startswith(mount.root) else path
    return os.path.normpath(mount.mount_point + "/" + relative.lstrip("/"))


def find_run_cgroups(invocation_id: str, *, depth: int = 6) -> list[Cgroup]:
    """The run's cgroups on this node, in every mounted hierarchy (for ``ddsup cleanup``
    by invocation id alone): directories named ``ddsup-<id>`` at most ``depth`` deep."""
    wanted = RUN_PREFIX + invocation_id
    found = []
    for mount in _proc.cgroup_mounts():
        if mount.version == 2:
            kind = CgroupKind.V2
        elif "freezer" in mount.controllers:
            kind = CgroupKind.FREEZER
        elif "pids" in mount.controllers:
            kind = CgroupKind.PIDS
        else:
            continue
        top = mount.mount_point.rstrip(os.sep).count(os.sep)
        for directory, dirs, _files in os.walk(mount.mount_point):
            if os.path.basename(directory) == wanted:
                found.append(Cgroup(kind, directory))
                dirs.clear()
            elif directory.count(os.sep) - top >= depth:
                dirs.clear()
    return found


def is_run_cgroup(cgroup: Cgroup, invocation_id: str) -> bool:
    """Whether ``cgroup`` is the run's cgroup or inside it (never end anything else)."""
    return (RUN_PREFIX + invocation_id) in cgroup.path.split(os.sep)
