"""The spawner program: forks units' processes straight into their cgroups for a supervisor.

A unit's process must be born in its cgroup, so that nothing it forks can start outside
it. Moving the supervisor into the cgroup around a fork does that, but a move takes the
kernel's cgroup write lock, which waits for an RCU grace period whenever no move happened
in the last one: on the path from a crash to its restart. ``clone3`` with
``CLONE_INTO_CGROUP`` (cgroup v2, Linux 5.7) creates the process in the target cgroup
with no move at all. Python has no ``clone3``, and calling it through ``ctypes`` in the
supervisor would run Python in a copy of a process of many threads, where a lock that
another thread held at the clone (``malloc``'s) stays held for good. So a small
single-threaded process of its own does it: this program, started by the supervisor (``_spawner``) as ``python
-I -S _spawner_program.py FD CGROUP`` (no site-packages, standard library only; with
``_signal``, ``_socket`` and ``marshal``, not the modules that import ``enum``, so that
it starts fast).

With ``CLONE_PARENT`` the new process is the supervisor's child, not ours: the supervisor
waits for it, reaps it and signals its group as it does a child it forked itself. Before
its ``exec`` the child does what ``subprocess.Popen`` does for ``spawn`` (stdin on
``/dev/null``, stdout and stderr the given descriptor, the working directory, the
signals Python changed back to their defaults, a new session); what fails is reported
through a close-on-exec pipe, as ``subprocess`` reports it.

The protocol over FD (a stream socket): the program first writes one line, ``ok`` when a
clone into its own cgroup worked, or ``no <errno>``, and exits after a ``no``. Each
request is a 4-byte length and that many bytes of ``marshal`` data (``argv``, ``env``,
``cwd``), the first byte carrying two descriptors (the output, the cgroup's directory);
each answer is three 4-byte integers: the PID (0: none was created), the step that failed
(``OK``, ``CLONE``, ``SETUP``, ``CHDIR``, ``EXEC``) and its errno. End of file ends it.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # signal's C half: no stubs, no enum
import _socket
import marshal
import os
import sys

OK, CLONE, SETUP, CHDIR, EXEC = range(5)
ANSWER = 12  # bytes: pid, step, errno
_SYS_CLONE3 = 435  # one number on every architecture (it came after their tables merged)
_CLONE_PARENT = 0x00008000
_CLONE_INTO_CGROUP = 0x200000000
_CLONE_ARGS = "flags pidfd child_tid parent_tid exit_signal stack stack_size tls set_tid"
_CLONE_ARGS += " set_tid_size cgroup"
_STOP_SIGNALS = (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP, _signal.SIGUSR1, _signal.SIGUSR2)


def _int(value: int) -> bytes:
    return value.to_bytes(4, "little", signed=True)


def _answer(pid: int, step: int, errno: int) -> bytes:
    return _int(pid) + _int(step) + _int(errno)


class Cloner:
    """``clone3`` into a cgroup, from this single-threaded process."""

    def __init__(self) -> None:
        import ctypes  # here, not at the top: the supervisor imports this module's names

        class CloneArgs(ctypes.Structure):  # struct clone_args, CLONE_ARGS_SIZE_VER2
            _fields_ = [(name, ctypes.c_uint64) for name in _CLONE_ARGS.split()]

        self._ctypes = ctypes
        self._args = CloneArgs
        # PyDLL: the call keeps the GIL, so the child (a copy of this one thread) holds it
        self._libc = ctypes.PyDLL(None, use_errno=True)
        self._libc.syscall.restype = ctypes.c_long

    def clone(self, cgroup_fd: int, *, parent: bool) -> int:
        """0 in the child, the child's PID here; raises OSError. ``parent``: the child is
        our parent's (a child given ``CLONE_PARENT`` takes our exit signal, SIGCHLD)."""
        flags = _CLONE_INTO_CGROUP | (_CLONE_PARENT if parent else 0)
        args = self._args(flags=flags, exit_signal=0 if parent else _signal.SIGCHLD)
        args.cgroup = cgroup_fd
        size = self._ctypes.sizeof(args)
        pid: int = self._libc.syscall(_SYS_CLONE3, self._ctypes.byref(args), size)
        if pid < 0:
            err = self._ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        return pid


def probe(cloner: Cloner, cgroup_fd: int) -> int:
    """0 when a child can be cloned into ``cgroup_fd`` (ours: it exits at once, and we
    reap it), else the errno that refused it."""
    try:
        pid = cloner.clone(cgroup_fd, parent=False)
    except OSError as err:
        return err.errno or 1
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return 0


_NOT_HERE = (2, 20)  # ENOENT, ENOTDIR: try the next directory of PATH

# what this process changed, put back in the child: Python ignores SIGPIPE and SIGXFSZ
# (``subprocess`` restores both), and we ignore the stop signals (see ``main``)
RESTORED: dict[int, object] = {_signal.SIGPIPE: _signal.SIG_DFL, _signal.SIGXFSZ: _signal.SIG_DFL}


def exec_candidates(program: str, env: dict[str, str]) -> list[str]:
    """Where ``subprocess`` looks for ``program``: itself when it names a directory, else
    in each directory of the unit's own ``PATH``."""
    if os.path.dirname(program):
        return [program]
    return [os.path.join(directory, program) for directory in os.get_exec_path(env)]


def child(request: tuple[list[str], dict[str, str], str], out_fd: int, report: int) -> None:
    """In the clone, before its exec (as ``subprocess`` does it for ``spawn``); reports a
    failure on ``report`` as (step, errno). Never returns."""
    argv, env, cwd = request
    step = SETUP
    try:
        os.dup2(os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC), 0)
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        step = CHDIR
        os.chdir(cwd)
        step = SETUP
        for signum, handler in RESTORED.items():
            _signal.signal(signum, handler)
        _signal.pthread_sigmask(_signal.SIG_SETMASK, ())
        os.setsid()
        os.closerange(3, report)  # what the unit inherits: its three standard streams
        os.closerange(report + 1, os.sysconf("SC_OPEN_MAX"))
        step = EXEC
        execute(argv, env)
    except OSError as err:
        os.write(report, _int(step) + _int(err.errno or 0))
    except BaseException:
        os.write(report, _int(step) + _int(0))
    finally:
        os._exit(127)


def execute(argv: list[str], env: dict[str, str]) -> None:
    """``execve`` as ``subprocess`` does it; raises the first error that is not "not
    here", else the last one."""
    first: OSError | None = None
    last: OSError | None = None
    for path in exec_candidates(argv[0], env):
        try:
            os.execve(path, argv, env)
        except OSError as err:
            last = err
            if first is None and err.errno not in _NOT_HERE:
                first = err
    raise first or last or OSError(2, os.strerror(2))


def _receive(sock: _socket.socket) -> tuple[bytes, list[int]] | None:
    """One request and its descriptors; None at end of file."""
    space = _socket.CMSG_SPACE(2 * 4)
    head, ancillary, _flags, _addr = sock.recvmsg(4, space, _socket.MSG_CMSG_CLOEXEC)
    fds: list[int] = []
    for level, kind, data in ancillary:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            fds += [int.from_bytes(data[i : i + 4], "little") for i in range(0, len(data), 4)]
    while 0 < len(head) < 4:
        head += sock.recv(4 - len(head))
    if len(head) < 4:
        for fd in fds:
            os.close(fd)
        return None
    size = int.from_bytes(head, "little")
    body = b""
    while len(body) < size:
        more = sock.recv(size - len(body))
        if not more:
            return None
        body += more
    return body, fds


def serve_one(cloner: Cloner, body: bytes, fds: list[int]) -> bytes:
    """Clone one unit's process; the answer (``ANSWER`` bytes)."""
    request = marshal.loads(body)
    out_fd, cgroup_fd = fds
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    try:
        try:
            pid = cloner.clone(cgroup_fd, parent=True)
        except OSError as err:
            return _answer(0, CLONE, err.errno or 0)
        if pid == 0:
            child(request, out_fd, write_end)
        os.close(write_end)
        write_end = -1
        failed = b""
        while chunk := os.read(read_end, 8):  # end of file: the child exec'd (or died)
            failed += chunk
        if len(failed) == 8:
            return _int(pid) + failed
        return _answer(pid, OK, 0)
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)


def main(argv: list[str]) -> int:
    """``_spawner_program.py FD CGROUP``: serve the supervisor on FD; CGROUP, the
    directory of our own cgroup, is where the first clone is tried."""
    if len(argv) != 3 or not argv[1].isdigit():
        print("usage: _spawner_program.py FD CGROUP (started by ddsup)", file=sys.stderr)
        return 2
    for signum in _STOP_SIGNALS:  # the supervisor ends us (end of file), not a scancel
        RESTORED[signum] = _signal.getsignal(signum)
        if RESTORED[signum] not in (_signal.SIG_IGN, _signal.SIG_DFL):
            RESTORED[signum] = _signal.SIG_DFL  # a handler of Python's: the default before
        _signal.signal(signum, _signal.SIG_IGN)
    os.set_inheritable(int(argv[1]), False)  # no unit of ours may hold it
    sock = _socket.socket(fileno=int(argv[1]))
    try:
        serve(sock, argv[2])
    except (BrokenPipeError, ConnectionResetError):
        return 0  # the supervisor is gone (or done with us): as at end of file
    return 0


def serve(sock: _socket.socket, home: str) -> None:
    """Say whether a clone into ``home`` works; then serve requests until end of file."""
    cloner = Cloner()
    try:
        home_fd = os.open(home, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        refused = probe(cloner, home_fd)
        os.close(home_fd)
    except OSError as err:
        refused = err.errno or 1
    sock.sendall(b"ok\n" if not refused else f"no {refused}\n".encode())
    while not refused:
        request = _receive(sock)
        if request is None:
            break
        body, fds = request
        try:
            answer = serve_one(cloner, body, fds) if len(fds) == 2 else _answer(0, SETUP, 0)
        finally:
            for fd in fds:
                os.close(fd)
        sock.sendall(answer)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
