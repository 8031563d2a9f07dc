"""A job's attempts in one state directory: the newest on top, the earlier ones kept.

A job that Slurm requeues, or that is resubmitted with the same ``--state-dir``, runs
again in the same directory, so that its worker finds its own output there (the
rehearsal's ``results.jsonl``) and goes on from it instead of starting over. Before the
new attempt writes anything, :func:`begin_attempt` moves what ddsup recorded of the
previous one (:data:`RECORD`: plan, events, logs, result, …) into ``attempts/<N>/``,
which is a state directory of its own (``ddsup status|logs|report --state-dir
DIR/attempts/0``). Files the units wrote stay where they are. The new attempt's number,
``DDSUP_ATTEMPT``, is that of the directory it will be kept in: 0, then 1, 2, …

The move goes through the held directory (``_private``): each entry is renamed relative
to the state directory's descriptor into ``attempts/<N>/``'s, so that a directory
swapped in under the path meanwhile gets nothing, and an entry that is a symlink is
moved as the link it is, never followed. The space a killed attempt kept for its
result (``.space-for-result``) is not part of its record: it is given back before the
move, which on a full disk needs room for ``attempts/<N>/``, and the new attempt keeps
its own (as much of it as the disk then has).

A directory whose run is still live is never taken over (:class:`StateDirError`): two
jobs would write one record and one output. A run that wrote ``result.json`` is over; one
that did not was killed, unless its ``ddsup start`` still runs (on this host: the pid
and start time ``run.json`` names; on another: its control port still answers).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from pathlib import Path

from ddsup._errors import StateDirError
from ddsup.process import read_stat
from ddsup.record._private import DIRECTORY_FLAGS, HeldDir, open_private_dir
from ddsup.record._run_info import RunInfo
from ddsup.record._state_dir import RESERVE, WORKERS_FILE, StateDir, hold_state_dir, state_dir_in
from ddsup.units import printable

ATTEMPTS = "attempts"
RECORD = (
    "run.json",
    "plan.json",
    "events.jsonl",
    "result.json",
    "control.secret",
    WORKERS_FILE,
    "report.html",
    "series",
    "containment",
    "logs",
)
"""What ddsup writes of one attempt, moved aside as a whole when the next one begins."""
PROBE_TIMEOUT = 2.0  # seconds for another host's control port to answer


def begin_attempt(path: Path | None, *, requeued: bool = False) -> tuple[StateDir, int]:
    """The run's state directory (``record._state_dir.create_state_dir``'s), once the
    previous attempt's record in it (if any) was moved into ``attempts/<N>/``; and the
    number of the attempt that begins. StateDirError: the directory is not safe, or its
    run is live."""
    held = hold_state_dir(path, requeued=requeued)
    try:
        attempt = keep_previous(held)
    except BaseException:
        held.close()
        raise
    return state_dir_in(held), attempt


def keep_previous(held: HeldDir) -> int:
    """Move the previous attempt's record in ``held`` (if any) into ``attempts/<N>/``; the
    number of the attempt that begins (the attempts before it)."""
    attempts = _open_attempts(held)
    try:
        number = max(_numbers(attempts), default=-1) + 1  # the next free one
        present = [name for name in RECORD if _recorded(held, name)]
        if not present:
            return number
        why = live_run(held)
        if why is not None:
            name = printable(str(held.path))
            raise StateDirError(
                f"{name} holds a run that is still live ({why}): stop it first (ddsup stop "
                f"--state-dir {name}), or give this run another --state-dir"
            )
        with contextlib.suppress(OSError):  # a killed attempt's: on a full disk, the move's
            os.unlink(RESERVE, dir_fd=held.fd)
        if attempts is None:
            attempts = _made(held, ATTEMPTS)
        _move(held, present, attempts, str(number))
    finally:
        if attempts is not None:
            attempts.close()
    return number + 1


def _move(held: HeldDir, names: list[str], attempts: HeldDir, number: str) -> None:
    """Rename each of ``names`` from ``held`` into a new ``attempts/<number>/``, descriptor
    to descriptor."""
    into = _made(attempts, number, exclusive=True)
    try:
        for name in names:
            os.rename(name, name, src_dir_fd=held.fd, dst_dir_fd=into.fd)
    except OSError as err:
        raise StateDirError(
            f"cannot keep the previous attempt's record in {printable(str(into.path))}: "
            f"{err.strerror}"
        ) from err
    finally:
        into.close()


def _made(held: HeldDir, name: str, *, exclusive: bool = False) -> HeldDir:
    """``name`` in ``held``, made (0700) and held once it passed the checks of a private
    directory; StateDirError when it cannot be made or is not safe."""
    try:
        os.mkdir(name, 0o700, dir_fd=held.fd)
    except FileExistsError:
        if exclusive:
            raise StateDirError(f"{printable(str(held.path / name))} exists already") from None
    except OSError as err:
        raise StateDirError(
            f"cannot make {printable(str(held.path / name))}: {err.strerror}"
        ) from err
    try:
        return open_private_dir(name, held.path / name, dir_fd=held.fd, error=StateDirError)
    except OSError as err:
        raise StateDirError(
            f"cannot open {printable(str(held.path / name))}: {err.strerror}"
        ) from err


def _open_attempts(held: HeldDir) -> HeldDir | None:
    """``attempts/`` held (None when there is none yet); StateDirError when not safe."""
    try:
        return open_private_dir(ATTEMPTS, held.path / ATTEMPTS, dir_fd=held.fd, error=StateDirError)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise StateDirError(
            f"cannot open {printable(str(held.path / ATTEMPTS))}: {err.strerror}"
        ) from err


def live_run(held: HeldDir) -> str | None:
    """Why the run recorded in ``held`` is still live; None when it is over."""
    if _exists(held, "result.json"):
        return None
    try:
        run = RunInfo.from_json(json.loads(held.read("run.json", error=StateDirError)))
    except (OSError, StateDirError, KeyError, TypeError, ValueError):
        return None  # no run.json of ours (or a link): nothing says where a run would live
    if run.host in (None, socket.gethostname()):
        return None if _gone(run) else f"its ddsup start, pid {run.pid}, is running"
    control = run.control
    if control is None:
        return None
    try:
        with socket.create_connection((control.host, control.port), timeout=PROBE_TIMEOUT):
            return f"its control channel on {run.host} ({control}) answers"
    except OSError:
        return None


def _gone(run: RunInfo) -> bool:
    if run.pid is None or run.pid_start is None:
        return True
    status = read_stat(run.pid)
    return status is None or status.dead or status.start_time != run.pid_start


def _exists(held: HeldDir, name: str) -> bool:
    """Whether ``held`` has an entry ``name`` (a symlink is one; it is not followed)."""
    try:
        os.stat(name, dir_fd=held.fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    except OSError:
        return True  # there, though it cannot be examined
    return True


def _recorded(held: HeldDir, name: str) -> bool:
    """Part of a record: present, and (``logs/``, which every state dir has) not an empty
    directory."""
    if not _exists(held, name):
        return False
    if name != "logs":
        return True
    try:
        fd = os.open(name, DIRECTORY_FLAGS, dir_fd=held.fd)
    except OSError:
        return True  # a symlink or a file: moved aside as it is
    try:
        return bool(os.listdir(fd))
    finally:
        os.close(fd)


def _numbers(attempts: HeldDir | None) -> list[int]:
    """The numbers of the attempts kept in ``attempts/``."""
    if attempts is None:
        return []
    names = os.listdir(attempts.fd)
    return sorted(int(name) for name in names if name.isascii() and name.isdigit())
