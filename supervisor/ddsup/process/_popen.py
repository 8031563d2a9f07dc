"""A child started before trio runs (``ddsup start``'s agents), and what spawning shares.

``ddsup start`` spawns its agents' ``srun`` before it imports trio (``controller._head_start``),
with :func:`start_child`: the same child as :func:`~ddsup.process._child.spawn` makes (no
shell, its own session, stdin on ``/dev/null``, output appended to its log), with
``subprocess`` alone. Once trio runs, :func:`~ddsup.process._child.adopt` makes it a
:class:`~ddsup.process._child.ChildProcess` like any other. So this module imports the
standard library only.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress

from ddsup._errors import DdsupError
from ddsup.process._file_at import LogFile, open_file


class SpawnError(DdsupError):
    """A unit's program could not be started (not found, not executable, bad directory)."""


def spawn_error(argv: Sequence[str], cwd: object, err: OSError) -> SpawnError:
    """Say why exec failed in words that point at the fix."""
    program = argv[0]
    reason = os.strerror(err.errno) if err.errno else str(err)
    if err.filename is not None and os.fsdecode(err.filename) == os.fsdecode(str(cwd)):
        hint = f"working directory {os.fsdecode(str(cwd))!r}"
    elif err.errno == errno.ENOENT and "/" not in program:
        hint = f"argv[0] {program!r} not on PATH"
    elif err.errno == errno.EACCES:
        hint = f"{program!r} is not executable"
    else:
        hint = f"argv[0] {program!r}"
    return SpawnError(f"cannot start {program!r}: {reason} ({hint})")


LogError = Callable[[OSError], None]


def open_log(log_path: LogFile | os.PathLike[str], on_error: LogError | None) -> int:
    """The log's descriptor (never through a symlink); /dev/null when ``on_error`` says so.

    Without ``on_error`` a log that cannot be opened is a SpawnError. With it, the
    failure is reported there and the output goes to /dev/null: a full or read-only
    state directory must not stop a unit from starting.
    """
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        return open_file(log_path, flags)
    except OSError as err:
        if on_error is None:
            name = str(log_path)
            raise SpawnError(f"cannot open log file {name!r}: {err.strerror}") from err
        on_error(err)
        return os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)


def start_child(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str | os.PathLike[str],
    log_path: LogFile | os.PathLike[str],
    on_log_error: LogError | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` as ``spawn`` would with ``log_path`` (no unit: no cgroup of its
    own), without trio; the caller adopts it once trio runs, or kills and waits for it."""
    return _start(argv, env, cwd, log_path, on_log_error)


def start_forker(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str | os.PathLike[str],
    log_path: LogFile | os.PathLike[str],
    on_log_error: LogError | None,
    spec: bytes,
    pass_fds: Sequence[int],
) -> subprocess.Popen[bytes]:
    """Start ``argv`` as :func:`start_child` does, but with ``spec`` on its stdin and its
    stdout a pipe to us (``popen.stdout``; its stderr is still the log): a process that
    forks others and reports them (``agent._agent_forker``). ``pass_fds`` are inherited
    (the forked processes' logs)."""
    popen = _start(argv, env, cwd, log_path, on_log_error, report=True, pass_fds=pass_fds)
    assert popen.stdin is not None
    with suppress(BrokenPipeError):  # it died first: its exit status and log say why
        try:
            popen.stdin.write(spec)  # it reads all of it before its heavy imports
        finally:
            popen.stdin.close()
    return popen


def _start(
    argv: Sequence[str],
    env: Mapping[str, str],
    cwd: str | os.PathLike[str],
    log_path: LogFile | os.PathLike[str],
    on_log_error: LogError | None,
    *,
    report: bool = False,
    pass_fds: Sequence[int] = (),
) -> subprocess.Popen[bytes]:
    """``argv`` in its own session, output appended to its log; with ``report``, its
    stdin and stdout are pipes to us instead of ``/dev/null`` and the log."""
    if not argv:
        raise SpawnError("cannot start a process with an empty argv")
    out_fd = open_log(log_path, on_log_error)
    try:
        return subprocess.Popen(
            list(argv),
            env=dict(env),
            cwd=cwd,
            stdin=subprocess.PIPE if report else subprocess.DEVNULL,
            stdout=subprocess.PIPE if report else out_fd,
            stderr=out_fd,
            pass_fds=tuple(pass_fds),
            start_new_session=True,
        )
    except OSError as err:
        raise spawn_error(argv, cwd, err) from err
    finally:
        os.close(out_fd)
