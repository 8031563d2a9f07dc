"""No orphans: the layers that end every process of a run, however the run ends.

In the order they act (``docs/no-orphans.md`` tells the whole story):

1. ``ChildProcess.stop`` (in ``ddsup._process``): the unit's group, then what escaped it.
2. ``become_subreaper`` + ``reap_adopted_children``: orphans of our units are reparented
   to us instead of to init, so they stay visible, and their zombies are reaped.
3. ``sweep_until_gone``: at the end of a run, SIGKILL whatever still carries the run's
   ``DDSUP_INVOCATION_ID`` (setsid grandchildren whose parent died included).
4. ``start_sentinel``: a tiny process that does step 3 when we are SIGKILLed.
5. ``ddsup cleanup``: step 3 by hand, for a node where all of the above were killed too.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Collection
from pathlib import Path

import trio

from ddsup import _sentinel
from ddsup._errors import RunStateError, UsageError
from ddsup._process import managed_children

log = logging.getLogger(__name__)

_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37
_SWEEP_POLL = 0.02

find_run_processes = _sentinel.find_run_processes
sweep = _sentinel.sweep


def _prctl(option: int, arg: object) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, arg, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def become_subreaper() -> None:
    """Make orphaned descendants reparent to us rather than to init (Linux only).

    Without it, a unit's setsid grandchild whose parent died belongs to PID 1 and we
    could only find it by its environment; with it, it is our child, we reap it, and it
    cannot outlive us unnoticed.
    """
    if not sys.platform.startswith("linux"):
        log.debug("not Linux: no child subreaper; orphans are found by sweeping only")
        return
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def is_subreaper() -> bool:
    """Whether this process is a child subreaper (False where the notion does not exist)."""
    if not sys.platform.startswith("linux"):
        return False
    flag = ctypes.c_int(0)
    _prctl(_PR_GET_CHILD_SUBREAPER, ctypes.pointer(flag))
    return flag.value != 0


def _child_pids() -> set[int]:
    """Our children, zombies included, by their parent field in ``/proc/PID/stat``.

    Not ``/proc/self/task/*/children``: an orphan is adopted by one of our threads, trio's
    worker threads come and go, and that per-thread list was seen to miss adopted children.
    """
    me = str(os.getpid()).encode()
    pids: set[int] = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[1:2] == [me]:
            pids.add(int(name))
    return pids


def _reapable(pid: int, own_session: int) -> bool:
    """A child we may reap: never a managed one (its owner reaps it), and never one in our
    own session. Orphans of our units can only be in other sessions (units start in new
    sessions, and no process can join a session), while a child in our session was forked
    by code in this process (``trio.run_process``, ``subprocess``) that will reap it."""
    try:
        return os.getsid(pid) != own_session
    except ProcessLookupError:
        return False


async def _reap_once() -> int:
    registry = managed_children()
    reaped = 0
    async with registry.lock:  # spawn holds it from fork to registration
        own_session = os.getsid(0)
        # a /proc scan costs milliseconds per hundred processes: keep it off the event loop
        children = await trio.to_thread.run_sync(_child_pids)
        for pid in children - registry.pids:
            if not _reapable(pid, own_session):
                continue
            with contextlib.suppress(ChildProcessError):
                if os.waitpid(pid, os.WNOHANG)[0] == pid:  # noqa: ASYNC222 (WNOHANG: never blocks)
                    reaped += 1
    return reaped


async def reap_adopted_children(
    *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """Reap adopted zombies on every SIGCHLD, forever (run it in the supervisor's nursery)."""
    with trio.open_signal_receiver(signal.SIGCHLD) as signals:
        task_status.started()
        await _reap_once()  # orphans that died before we listened
        async for _ in signals:
            await _reap_once()


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


class Sentinel:
    """The process that sweeps the run if we die without cleaning up (see ``_sentinel``)."""

    def __init__(self, popen: subprocess.Popen[bytes], write_fd: int) -> None:
        self._popen = popen
        self._write_fd: int | None = write_fd
        self.pid = popen.pid

    def close(self) -> None:
        """Normal exit: tell the sentinel to quit without sweeping, and reap it. Idempotent."""
        if self._write_fd is None:
            return
        with contextlib.suppress(BrokenPipeError):
            os.write(self._write_fd, _sentinel.QUIT)
        os.close(self._write_fd)
        self._write_fd = None
        try:
            self._popen.wait(timeout=2.0)  # it exits as soon as it has read the byte
        except subprocess.TimeoutExpired:
            self._popen.kill()
            self._popen.wait()


def start_sentinel(invocation_id: str) -> Sentinel:
    """Start the sentinel of ``invocation_id``: a process in its own session (our group
    kills miss it) that does not carry the id (sweeps miss it) and waits for our death."""
    read_fd, write_fd = os.pipe()  # both close-on-exec: no unit inherits the write end
    env = {k: v for k, v in os.environ.items() if k != _sentinel.ENV_NAME}
    try:
        popen = subprocess.Popen(
            [sys.executable, "-I", "-S", _sentinel.__file__, str(read_fd), invocation_id],
            env=env,
            cwd="/",
            stdin=subprocess.DEVNULL,
            pass_fds=(read_fd,),
            start_new_session=True,
        )
    except BaseException:
        os.close(write_fd)
        raise
    finally:
        os.close(read_fd)
    return Sentinel(popen, write_fd)


def configure_cleanup(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--state-dir", type=Path, help="the run's state directory (reads run.json)")
    which.add_argument("--invocation", metavar="ID", help="the run's DDSUP_INVOCATION_ID")


def _invocation_from_state_dir(state_dir: Path) -> str:
    run_json = state_dir / "run.json"
    try:
        data = json.loads(run_json.read_text())
    except FileNotFoundError as err:
        raise RunStateError(
            f"{run_json}: no such file; is {state_dir} a ddsup state directory?"
        ) from err
    except (OSError, ValueError) as err:
        raise RunStateError(f"{run_json}: cannot read the run's state: {err}") from err
    invocation_id = data.get("invocation_id") if isinstance(data, dict) else None
    if not isinstance(invocation_id, str) or not invocation_id:
        raise RunStateError(f"{run_json}: no key 'invocation_id' (a string) in the run's state")
    return invocation_id


def run_cleanup(args: argparse.Namespace) -> int:
    """End every process of the run on this node; safe to repeat, touches nothing else."""
    invocation_id = args.invocation
    if args.state_dir is not None:
        invocation_id = _invocation_from_state_dir(args.state_dir)
    if not invocation_id or "\0" in invocation_id:
        raise UsageError("--invocation needs a non-empty invocation id")
    hit, survivors = _sentinel.sweep_until_gone_sync(invocation_id)
    print(f"ended {len(hit)} process(es) of run {invocation_id}")
    if survivors:
        print(f"ddsup: error: still alive after SIGKILL: {survivors}", file=sys.stderr)
        return 1
    return 0
