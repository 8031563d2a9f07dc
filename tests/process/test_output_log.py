"""A unit's output into its log: rotation at the cap, never blocking the unit, nothing lost
without a notice (``ddsup.process._output_log``)."""

from __future__ import annotations

import os
import re
import sys
import threading
from pathlib import Path

import pytest
import trio

from ddsup.process import OutputLog, output_pipe, rotated_log, spawn
from ddsup.process._output_log import dropped_notice
from support.polls import until

MIB = 1 << 20


async def _copy_output(log: OutputLog, argv: list[str]) -> int:
    """Run ``argv`` with its output into ``log``; its exit code once the log has it all."""
    read_end, write_end = output_pipe()
    try:
        child = await spawn(argv, env=dict(os.environ), cwd=".", output=write_end)
    finally:
        os.close(write_end)
    async with trio.open_nursery() as nursery:
        log.copy_in(nursery, read_end, name="output")
        status = await child.wait()
    log.close()
    assert status.code is not None
    return status.code


def _lines(count: int, width: int = 100) -> list[str]:
    """Python writing ``count`` numbered lines of ``width`` bytes to stdout."""
    code = (
        "import sys\n"
        f"for i in range({count}):\n"
        f"    sys.stdout.write(f'{{i:08d}} ' + 'x' * {width - 10} + '\\n')\n"
    )
    return [sys.executable, "-c", code]


async def test_rotation_keeps_whole_lines_and_the_newest_files(tmp_path: Path) -> None:
    path = tmp_path / "lane@0.log"
    log = OutputLog(path, max_size=64 * 1024, max_files=2)
    assert await _copy_output(log, _lines(5000)) == 0  # 500 kB through a 64 kB cap
    files = [rotated_log(path, 2), rotated_log(path, 1), path]
    assert all(f.exists() for f in files) and not rotated_log(path, 3).exists()
    kept = b"".join(f.read_bytes() for f in files).splitlines()
    assert all(len(line) == 99 for line in kept)  # cuts fall on line ends
    numbers = [int(line.split()[0]) for line in kept]
    assert numbers == list(range(numbers[0], 5000))  # the newest, in order, none missing
    assert all(f.stat().st_size < 64 * 1024 + 100 for f in files)  # over by less than a line
    assert log.dropped_total == 0


def test_a_line_ends_in_the_file_it_began_in(tmp_path: Path) -> None:
    path = tmp_path / "cut.log"
    log = OutputLog(path, max_size=1000, max_files=1)
    log._write((b"a" * 99 + b"\n") * 9 + b"b" * 50)  # 950 bytes, ending in half a line
    log._write(b"b" * 60 + b"\n" + b"c" * 99 + b"\n")  # the b line ends past the cap
    log.close()
    assert rotated_log(path, 1).read_bytes().endswith(b"\n" + b"b" * 110 + b"\n")
    assert path.read_bytes() == b"c" * 99 + b"\n"


async def test_without_kept_files_the_log_starts_over_at_the_cap(tmp_path: Path) -> None:
    path = tmp_path / "w.log"
    log = OutputLog(path, max_size=64 * 1024, max_files=0)
    assert await _copy_output(log, _lines(2000)) == 0
    assert not rotated_log(path, 1).exists()
    numbers = [int(line.split()[0]) for line in path.read_bytes().splitlines()]
    assert numbers[-1] == 1999 and numbers == list(range(numbers[0], 2000))
    assert path.stat().st_size < 64 * 1024 + 100


async def test_a_stalled_file_never_blocks_the_unit_and_drops_are_said(tmp_path: Path) -> None:
    """The file takes no write (a hung file system) while the unit writes 48 MiB: the unit
    still finishes, 16 MiB wait in memory, the rest is dropped and counted in the file."""
    path = tmp_path / "fast.log"
    log = OutputLog(path, max_size=1 << 30, max_files=1, backlog=16 * MIB)
    stalled, written = threading.Event(), log._write

    def stalled_write(data: bytes) -> None:
        stalled.wait()  # runs in the worker thread: only the file waits
        written(data)

    log._write = stalled_write  # type: ignore[method-assign]
    code = "import sys; b = b'y' * 65536\nfor _ in range(768): sys.stdout.buffer.write(b)"
    read_end, write_end = output_pipe()
    try:
        child = await spawn(
            [sys.executable, "-c", code], env=dict(os.environ), cwd=".", output=write_end
        )
    finally:
        os.close(write_end)
    async with trio.open_nursery() as nursery:
        log.copy_in(nursery, read_end, name="output")
        with trio.fail_after(60):
            status = await child.wait()  # the writer is never held up by the file
        assert status.code == 0
        stalled.set()
    log.close()
    data = path.read_bytes()
    notices = re.findall(rb"\n\[ddsup: dropped (\d+) bytes of output: [^]]*\]\n", data)
    dropped = sum(int(n) for n in notices)
    assert dropped == log.dropped_total > 0  # every drop is said in the file
    kept = len(data) - sum(len(dropped_notice(int(n))) for n in notices)
    assert kept + dropped == 48 * MIB  # every byte written, or counted as dropped
    assert kept <= 16 * MIB + 2 * MIB  # the backlog, and what the pipe held at the end


async def test_where_a_start_s_output_begins_is_known_without_the_file(tmp_path: Path) -> None:
    """Before each start of a unit, the log tells where its output will begin (``logs
    --since``). Once the file is open, every byte in it is ours: that place is known
    without a look at the file, through a rotation too, so a restart does not wait for
    a file that stalls (a shared file system) or for a worker thread."""
    path = tmp_path / "lane@0.log"
    log = OutputLog(path, max_size=64 * 1024, max_files=1)
    assert await log.size() == 0  # the file is made here (in a thread)
    stalled, release = threading.Event(), threading.Event()

    def stalled_look() -> int:
        stalled.set()
        release.wait(10)  # bounded: a start that waits here shows below, not a hang
        return path.stat().st_size

    log._open_size = stalled_look  # type: ignore[method-assign]
    for count in (100, 1000):  # 10 kB, then 100 kB: over the cap, so it rotates
        read_end, write_end = output_pipe()
        try:
            child = await spawn(_lines(count), env=dict(os.environ), cwd=".", output=write_end)
        finally:
            os.close(write_end)
        async with trio.open_nursery() as nursery:
            log.copy_in(nursery, read_end, name="output")
            assert (await child.wait()).code == 0
        began = trio.current_time()
        size = await log.size()
        assert trio.current_time() - began < 1.0 and not stalled.is_set()
        assert size == path.stat().st_size > 0
    release.set()
    assert rotated_log(path, 1).exists()
    log.close()


@pytest.mark.parametrize("first", ["size", "copy"])
async def test_a_log_file_slow_to_create_never_holds_the_event_loop(
    first: str, tmp_path: Path
) -> None:
    """The log is created (by the look at its size before a start, or else by the copy
    of the output) in a worker thread (a directory that 128 agents create their logs in,
    a stalled shared file system): meanwhile the event loop keeps its turns, and the
    unit's output reaches the file once it exists."""
    path = tmp_path / "lane@0.log"
    log = OutputLog(path, max_size=1 << 20, max_files=1)
    entered, release = threading.Event(), threading.Event()
    real_open = log._open

    def slow_open() -> int:
        entered.set()
        release.wait(10)  # bounded: a loop held here shows in the turn below, not a hang
        return real_open()

    log._open = slow_open  # type: ignore[method-assign]
    read_end, write_end = output_pipe()
    try:
        child = await spawn(_lines(100), env=dict(os.environ), cwd=".", output=write_end)
    finally:
        os.close(write_end)
    sizes: list[int] = []
    sized = trio.Event()

    async def size() -> None:
        sizes.append(await log.size())
        sized.set()

    async with trio.open_nursery() as nursery:
        if first == "size":
            nursery.start_soon(size)
        else:
            log.copy_in(nursery, read_end, name="output")
        began = trio.current_time()
        await trio.to_thread.run_sync(entered.wait, 10)  # the file's creation waits now
        assert trio.current_time() - began < 1.0  # the loop was not held meanwhile
        assert not path.exists()
        release.set()
        if first == "size":
            await sized.wait()
            assert sizes == [0]  # the file it made
            log.copy_in(nursery, read_end, name="output")
        assert (await child.wait()).code == 0
    log.close()
    assert len(path.read_bytes().splitlines()) == 100


async def test_a_copy_ends_at_its_deadline_when_an_escaped_process_holds_the_pipe(
    tmp_path: Path,
) -> None:
    """A process that keeps the pipe open (an engine its server left) is read for as long
    as it writes, and its copy ends when the owner says so (the service is over)."""
    log = OutputLog(tmp_path / "held.log", max_size=MIB, max_files=1)
    code = "import time\nprint('still here', flush=True)\ntime.sleep(300)"
    read_end, write_end = output_pipe()
    try:
        child = await spawn(
            [sys.executable, "-c", code], env=dict(os.environ), cwd=".", output=write_end
        )
    finally:
        os.close(write_end)
    try:
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                log.copy_in(nursery, read_end, name="output")
                held = tmp_path / "held.log"
                try:
                    await until(
                        lambda: held.exists() and b"still here" in held.read_bytes(),
                        "the held process's line in the log",
                    )
                finally:  # the copy is shielded: without an end it would hold the nursery
                    log.end_copies(trio.current_time() + 0.1)
    finally:
        await child.stop(15, 5.0)
    log.close()


async def test_a_refused_write_is_counted_and_said_once_the_file_takes_writes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "gone.log"
    log = OutputLog(path, max_size=MIB, max_files=1)
    calls = {"n": 0}
    written = log._write

    def failing_once(data: bytes) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError(28, "No space left on device")
        written(data)

    log._write = failing_once  # type: ignore[method-assign]
    code = "import sys, time; print('first', flush=True); time.sleep(0.5); print('second')"
    assert await _copy_output(log, [sys.executable, "-c", code]) == 0
    text = path.read_text()
    assert "first" not in text and text.endswith("second\n")
    found = re.search(
        r"\[ddsup: dropped (\d+) bytes of output: the log file did not keep up\]", text
    )
    assert found and int(found.group(1)) in (5, 6), text  # "first", maybe its newline too
