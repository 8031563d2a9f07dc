"""The sentinel: a tiny process that sweeps the run when its supervisor dies uncleanly.

This module (with ``_ending`` and what it imports: ``_cgroup``, ``_registry``, ``_sweep``,
``_proc``) is the whole of what the sentinel process runs, so they all import the
standard library only: the sentinel is
started as ``python -I -S _sentinel.py`` (no site-packages, no ``.pth`` files), which
keeps its start-up in the tens of milliseconds and keeps it working when the supervisor's
environment is broken. The supervisor's side (:func:`start_sentinel`) is here too.

The sentinel holds the read end of a pipe whose write end only the supervisor holds. The
kernel closes that write end however the supervisor ends, SIGKILL included, so end of file
on the pipe is the one signal of "the supervisor is gone" that cannot be missed. A byte
``q`` before the end of file means a normal exit: the supervisor cleaned up by itself.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys

if __name__ == "__main__":  # the sentinel program (python -I -S): its siblings by path
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import _ending  # type: ignore[import-not-found,unused-ignore]
    import _sweep  # type: ignore[import-not-found,unused-ignore]
else:
    from ddsup.process import _ending, _sweep

QUIT = b"q"


def _ignore_stop_signals() -> None:
    """The supervisor decides when its units stop; a SIGTERM from scancel or a Ctrl-C
    must reach the supervisor (for a graceful stop), not make the sentinel sweep early."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_IGN)


def _wait_for_parent(fd: int) -> bool:
    """Block until the supervisor closes the pipe; True when it asked us to quit."""
    while True:
        data = os.read(fd, 1)
        if not data:
            return False
        if data == QUIT:
            return True


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
            os.write(self._write_fd, QUIT)
        os.close(self._write_fd)
        self._write_fd = None
        try:
            self._popen.wait(timeout=2.0)  # it exits as soon as it has read the byte
        except subprocess.TimeoutExpired:
            self._popen.kill()
            self._popen.wait()


def start_sentinel(
    invocation_id: str, records: int | None = None, name: str | None = None, *, root: bool = True
) -> Sentinel:
    """Start the sentinel of ``invocation_id``: a process in its own session (our group
    kills miss it) that does not carry the id (sweeps miss it) and waits for our death.

    ``records`` is a descriptor of the run's ``containment`` directory (the one this
    supervisor writes its records through; the sentinel inherits it, so it reads what
    was recorded there, never what a path names by the time it reads) and ``name`` this
    supervisor's name in it: the sentinel then also ends the cgroups and registry
    entries recorded there, those of every supervisor on this machine when ``root``
    (``ddsup start``: its death ends the run), else only this supervisor's (a node
    agent). A node agent's sentinel sweeps by tag only what that agent started too (its
    units carry ``DDSUP_AGENT=<name>``): not the endpoint and worker that ``ddsup start``
    runs on the same node, nor other agents' units where simulated nodes share one
    machine, so a run that may lose a node goes on without it.
    """
    read_fd, write_fd = os.pipe()  # both close-on-exec: no unit inherits the write end
    env = {k: v for k, v in os.environ.items() if k != _sweep.ENV_NAME}
    argv = [sys.executable, "-I", "-S", __file__, str(read_fd), invocation_id]
    passed = [read_fd]
    if records is not None and name is not None:
        argv += [str(records), "*" if root else name]
        passed.append(records)
    try:
        popen = subprocess.Popen(
            argv,
            env=env,
            cwd="/",
            stdin=subprocess.DEVNULL,
            pass_fds=passed,
            start_new_session=True,
        )
    except BaseException:
        os.close(write_fd)
        raise
    finally:
        os.close(read_fd)
    return Sentinel(popen, write_fd)


def main(argv: list[str]) -> int:
    """``_sentinel.py FD INVOCATION_ID [RECORDS_FD NAME|*]``: end the run's processes on
    this node once FD reaches end of file."""
    fds = [argv[1], *argv[3:4]]
    if len(argv) not in (3, 5) or not all(fd.isdigit() for fd in fds) or not argv[2]:
        print(
            "usage: _sentinel.py FD INVOCATION_ID [RECORDS_FD NAME] (started by ddsup, not by hand)",
            file=sys.stderr,
        )
        return 2
    _ignore_stop_signals()
    if _wait_for_parent(int(argv[1])):
        return 0
    records, name = (int(argv[3]), argv[4]) if len(argv) == 5 else (None, "*")
    names = None if name == "*" else [name]
    ended = _ending.end_on_this_node(
        argv[2], records, names=names, agent=None if names is None else name
    )
    if ended.hit or ended.survivors:
        with contextlib.suppress(OSError):  # stderr may be gone with the supervisor
            print(
                f"ddsup sentinel: the supervisor of run {argv[2]} ended without cleaning up;"
                f" killed {len(ended.hit)} process(es) (cgroup {len(ended.cgroup)}, registry"
                f" {len(ended.registry)}, tag {len(ended.tag)}), {len(ended.survivors)}"
                f" survived: {ended.survivors}",
                file=sys.stderr,
            )
    return 1 if ended.survivors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
