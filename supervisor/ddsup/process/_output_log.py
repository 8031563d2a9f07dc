"""A unit instance's log: its processes' output, written by ddsup, rotated at a size.

A unit's stdout and stderr go into a pipe that ddsup reads as fast as it comes and
writes into ``logs/<instance>.log`` (one file for every start of the instance). Why
not let the process append to the file itself: nobody could then cap the file without
losing output (a rename leaves it writing into the old file; ``copytruncate`` loses
what is written between the copy and the truncate).

The rules, chosen so that a lane that writes fast is never slowed down by its log and
nothing is lost without a word:

- **Never blocking the unit, nor ddsup.** The pipe is read continuously (its buffer
  enlarged to 1 MiB where the kernel allows), independently of the file: every touch of
  the file (its creation, its size, writes, rotation) runs in a worker thread, so a slow
  or stalled shared file system delays only the file, and a directory that other
  processes create files in at the same moment does not hold the event loop (``ddsup
  start`` creates ``endpoint.log`` while its agents create theirs beside it).
- **A bounded backlog.** Output waits for the file in memory up to ``backlog`` bytes
  (16 MiB). Beyond that, new output is dropped, counted, and replaced in the file by one
  line ``[ddsup: dropped N bytes of output: the log file did not keep up]`` as soon as
  the file accepts writes again.
- **Rotation at the cap.** Once the file holds ``max_size`` bytes it is renamed
  ``<instance>.log.1`` (``.1`` becomes ``.2``, …), the oldest beyond ``max_files`` is
  deleted, and a new file begins; lines are not split between files (unless one is
  longer than 64 KiB), so a file may exceed the cap by less than a line. Deleted output is the documented cost of the cap, not a loss: the
  kept files are the newest ``max_size × (max_files + 1)`` bytes.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from collections import deque
from collections.abc import Callable
from pathlib import Path

import trio

from ddsup.process._file_at import LogFile, open_file, renamed, replace_file, unlink_file

log = logging.getLogger(__name__)

BACKLOG = 16 << 20  # bytes of output held in memory while the file is behind
PIPE_SIZE = 1 << 20  # requested pipe buffer (the unprivileged maximum by default)
_CHUNK = 1 << 16
_LINE_SEARCH = 1 << 16  # how far past the cap a line may go on before it is cut
_FILE_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW


def rotated_log(path: Path, number: int) -> Path:
    """``lane@3.log`` → ``lane@3.log.<number>`` (1 is the newest rotated file)."""
    return path.with_name(f"{path.name}.{number}")


def output_pipe() -> tuple[int, int]:
    """``(read end, write end)`` of a pipe for a child's output, close-on-exec, enlarged."""
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    with contextlib.suppress(OSError):
        fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
    return read_end, write_end


class OutputLog:
    """Writes the output of one instance's processes into its (rotating) log file."""

    def __init__(
        self,
        path: LogFile,
        *,
        max_size: int,
        max_files: int,
        backlog: int = BACKLOG,
        on_error: Callable[[OSError], None] | None = None,
    ) -> None:
        self.path = path
        self.on_error = on_error  # a file that refuses writes (full disk): told here, once
        self.max_size = max_size
        self.max_files = max_files
        self.backlog = backlog
        self.dropped_total = 0  # bytes dropped over the log's life (for tests and metrics)
        self._pending: deque[bytes] = deque()
        self._pending_bytes = 0
        self._in_flight = 0  # bytes of the batch being written (they count in the backlog)
        self._dropped = 0  # dropped (backlog full) since the last batch was taken
        self._lost = 0  # lost to writes the file refused, not said in the file yet
        self._fd: int | None = None
        self._size: int | None = None  # bytes in the open file, as its writer left it
        self._ends_line = True  # the current file ends with a whole line
        self._lock = trio.Lock()  # one batch at a time (a finished process may still drain)
        self._copies: list[CopyTask] = []

    def copy_in(self, nursery: trio.Nursery, read_end: int, *, name: str) -> None:
        """Copy a process's output (the pipe's ``read_end``) in a task of ``nursery``, from
        now until the last process holding the pipe is gone or :meth:`end_copies`."""
        copy = CopyTask(self, read_end)
        self._copies = [c for c in self._copies if not c.done] + [copy]
        nursery.start_soon(copy.run, name=name)

    def end_copies(self, deadline: float) -> None:
        """Every copy still running ends by ``deadline`` (trio's clock)."""
        for copy in self._copies:
            copy.scope.deadline = min(copy.scope.deadline, deadline)

    async def size(self) -> int:
        """Bytes in the current file now (where the next process's output will begin). The
        file is created here if it is not there yet, in a worker thread (every touch of
        the file runs in one: the module docstring), so the copy finds it open. Once it is
        open, every byte that goes into it is ours, and its size is known without a
        look: a restart does not wait for a thread."""
        known = self._size
        if known is not None:
            return known
        return await trio.to_thread.run_sync(self._open_size)

    def _open_size(self) -> int:
        try:
            self._size = os.fstat(self._open()).st_size
        except OSError:
            return 0  # the copy tries again, and says why
        return self._size

    async def copy(self, read_end: int) -> None:
        """Copy one process's output until every writer closed the pipe (EOF).

        Owns ``read_end`` and closes it. Run it in a :class:`CopyTask`, whose shielded
        scope keeps a stop from cutting off the last words of a process.
        """
        stream = trio.lowlevel.FdStream(read_end)
        try:  # the log exists from the start, as the process does
            if self._fd is None:
                await trio.to_thread.run_sync(self._open)
        except OSError as err:
            self._failed(err, "open")
        read_done = trio.Event()
        wake = _Wake()
        async with stream, trio.open_nursery() as nursery:
            nursery.start_soon(self._write_loop, read_done, wake)
            try:
                await self._read_loop(stream, wake)
            finally:
                read_done.set()
                wake.set()

    async def _read_loop(self, stream: trio.lowlevel.FdStream, wake: _Wake) -> None:
        while chunk := await stream.receive_some(_CHUNK):
            if self._in_flight + self._pending_bytes + len(chunk) > self.backlog:
                self._dropped += len(chunk)
                self.dropped_total += len(chunk)
            else:
                self._pending.append(chunk)
                self._pending_bytes += len(chunk)
            wake.set()

    async def _write_loop(self, read_done: trio.Event, wake: _Wake) -> None:
        while True:
            if not self._pending and not self._dropped and not self._lost:
                if read_done.is_set():
                    return
                await wake.wait()
                continue
            data = b"".join(self._pending)
            self._pending.clear()
            batch = self._pending_bytes
            self._in_flight += batch  # several copies may write (a process, its engine)
            self._pending_bytes = 0
            dropped, self._dropped = self._dropped, 0
            written = await self._write_batch(data, dropped)
            self._in_flight -= batch
            if not written:
                if read_done.is_set():
                    return  # nothing more will come, and the file takes nothing
                await wake.wait()  # try again with the next output

    async def _write_batch(self, data: bytes, dropped: int) -> bool:
        """Write ``data`` (in a thread) with notices of what is missing around it: bytes
        a refused write lost come before it, bytes the full backlog dropped after it.

        False when the file refused it: then it is counted, and said once the file takes
        writes again.
        """
        before = dropped_notice(self._lost) if self._lost else b""
        after = dropped_notice(dropped) if dropped else b""
        async with self._lock:
            try:
                await trio.to_thread.run_sync(self._write, before + data + after)
            except OSError as err:
                self._lost += dropped + len(data)
                self.dropped_total += len(data)
                self.close()
                self._failed(err, "write")
                return False
        self._lost = 0
        return True

    def _failed(self, err: OSError, what: str) -> None:
        """Say that the file refused us: to ``on_error`` (the run's faults), else the log."""
        if self.on_error is not None:
            self.on_error(err)
        else:
            log.warning("cannot %s %s: %s", what, self.path, err.strerror or err)

    def _write(self, data: bytes) -> None:
        """Append ``data``, rotating at the cap (runs in a worker thread).

        A line is never split between two files unless it is longer than 64 KiB: the cut
        falls after the last line end before the cap, or, when the file holds the start of
        a line at the cap, after the end of that line (a file exceeds the cap by less than
        a line).
        """
        while data:
            fd = self._open()
            size = os.fstat(fd).st_size
            room = self.max_size - size
            if len(data) <= room:
                head = data
            elif room <= 0 and self._ends_line:
                head = b""
            else:
                head = data[: _cut(data, max(room, 0))]
            if head:
                _write_all(fd, head)
                self._size = size + len(head)
                self._ends_line = head.endswith(b"\n")
                data = data[len(head) :]
            if data:
                self._rotate()

    def _open(self) -> int:
        if self._fd is None:
            self._fd = open_file(self.path, _FILE_FLAGS)
        return self._fd

    def _rotate(self) -> None:
        """``.log`` → ``.log.1`` → … → ``.log.<max_files>``; the oldest goes."""
        self._size = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._ends_line = True
        rotated = [
            renamed(self.path, f"{self.path.name}.{n}") for n in range(1, self.max_files + 1)
        ]
        names = [self.path, *rotated]
        with contextlib.suppress(FileNotFoundError):
            unlink_file(names[-1])
        for older, newer in zip(reversed(names[1:]), reversed(names[:-1]), strict=True):
            with contextlib.suppress(FileNotFoundError):
                replace_file(newer, older)

    def close(self) -> None:
        self._size = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class CopyTask:
    """One process's output copied into a log, in a task whose end its owner decides.

    The scope is shielded (a stop of the service must not cut off what its process still
    says) and exists before the task runs, so the owner can give it a deadline at any
    time: once the service is over, its copies get a moment to drain, then end.
    """

    def __init__(self, output: OutputLog, read_end: int) -> None:
        self.output = output
        self.read_end = read_end
        self.scope = trio.CancelScope(shield=True)
        self.done = False

    async def run(self) -> None:
        try:
            with self.scope:
                await self.output.copy(self.read_end)
        finally:
            self.done = True


class _Wake:
    """A re-armable wake-up: ``set`` any number of times, each ``wait`` sees the latest."""

    def __init__(self) -> None:
        self._event = trio.Event()

    def set(self) -> None:
        self._event.set()

    async def wait(self) -> None:
        await self._event.wait()
        self._event = trio.Event()


def dropped_notice(count: int) -> bytes:
    return f"\n[ddsup: dropped {count} bytes of output: the log file did not keep up]\n".encode()


def _cut(data: bytes, room: int) -> int:
    """Where to cut ``data`` so that the first part fits in ``room``: after its last line
    end there; else after the line end just beyond (a line finishes in the file it began
    in), unless that line goes on for more than 64 KiB."""
    before = data.rfind(b"\n", 0, room)
    if before >= 0:
        return before + 1
    after = data.find(b"\n", room, room + _LINE_SEARCH)
    return after + 1 if after >= 0 else room


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
