"""``ddsup logs``: a unit instance's output, whole, since a time, or followed."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import trio

from ddsup._errors import RunStateError, UsageError
from ddsup.ops._run_handle import add_state_dir, events_of, find_state, silence_stdout
from ddsup.record._events import ProcessStarted, RecordedEvent, UnitTransition
from ddsup.record._state_dir import StateDir
from ddsup.units import printable
from ddsup.units._durations import parse_duration

FOLLOW_INTERVAL = 0.2


# --- logs --------------------------------------------------------------------------------
def configure_logs(parser: argparse.ArgumentParser) -> None:
    add_state_dir(parser)
    parser.add_argument(
        "unit", metavar="UNIT", help="an instance (lane@3) or a unit (lane: all its instances)"
    )
    parser.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    parser.add_argument(
        "--since",
        metavar="WHEN",
        help="only output of processes alive since WHEN: a duration (10m) or an ISO time",
    )
    parser.add_argument(
        "-n", "--lines", type=int, metavar="N", help="only the last N lines (of each log)"
    )


def run_logs(args: argparse.Namespace) -> int:
    state = find_state(args)
    since = parse_since(args.since) if args.since else None
    if args.lines is not None and args.lines < 0:
        raise UsageError("--lines must be 0 or more")
    names = _log_names(state, args.unit)
    if not names:
        known = ", ".join(sorted(_listed(state), key=_natural)) or "none yet"
        raise UsageError(f"no log for {printable(repr(args.unit))}; known: {known}")
    reader = _LogReader(state, prefix=len(names) > 1 or args.unit.endswith("@"))
    events = events_of(state) if since is not None else []
    for name in names:
        reader.add(name, since, events, args.lines)
    out = sys.stdout.buffer
    try:
        reader.emit(out, final=not args.follow)
        if args.follow:
            trio.run(_follow, reader, out, args.unit)
    except BrokenPipeError:
        silence_stdout()
    except KeyboardInterrupt:
        return 130
    return 0


def parse_since(text: str) -> float:
    """``--since``: a duration back from now (``10m``, ``1h30m``) or an ISO 8601 time."""
    with contextlib.suppress(ValueError):
        return time.time() - parse_duration(text)
    try:
        moment = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(
            f"--since {text!r}: expected a duration (10m, 1h30m) or an ISO time "
            "(2026-12-02T14:30:00, local time unless it has an offset)"
        ) from None
    return moment.timestamp()  # naive: local time, as ``date`` prints it


def _log_names(state: StateDir, name: str) -> list[str]:
    """``lane@3`` (an instance, rank ``lane@3:1``, ``agent-n1``) or ``lane``/``lane@`` (all).

    Only names of the run count: planned instances, and the logs that ``logs/`` lists.
    A name is never joined to a path as given, so ``../../x`` names nothing.
    """
    known = set(_planned(state)) | _listed(state)
    if name in known:
        return [name]
    base = name.rstrip("@")
    return sorted((i for i in known if i.startswith(f"{base}@")), key=_natural)


def _listed(state: StateDir) -> set[str]:
    try:
        return {n[: -len(".log")] for n in os.listdir(state.logs) if n.endswith(".log")}
    except OSError:
        return set()


def _planned(state: StateDir) -> list[str]:
    try:
        instances = state.read_json(state.plan).get("instances", [])
        return [i["instance"] for i in instances if isinstance(i.get("instance"), str)]
    except (RunStateError, AttributeError, TypeError):
        return []


def _natural(name: str) -> tuple[Any, ...]:
    base, _, rest = name.partition("@")
    parts = rest.replace(":", "@").split("@")
    return (base, *(int(p) if p.isdigit() else p for p in parts))


class _LogReader:
    """Offsets into the log files chosen; prints whole lines from there on."""

    def __init__(self, state: StateDir, *, prefix: bool) -> None:
        self.state = state
        self.prefix = prefix
        self.offsets: dict[str, int] = {}

    def add(
        self, name: str, since: float | None, events: list[RecordedEvent], lines: int | None
    ) -> None:
        if name in self.offsets:
            return
        path = self.state.log(name)
        start = 0 if since is None else since_offset(path, name, since, events)
        if lines is not None:
            start = tail_offset(path, start, lines)
        self.offsets[name] = start

    def emit(self, out: BinaryIO, *, final: bool) -> None:
        """Print what is new; a partial last line waits for its newline unless ``final``."""
        for name, offset in self.offsets.items():
            data = _read_from(self.state.log(name), offset)
            if not final and b"\n" in data:
                data = data[: data.rfind(b"\n") + 1]
            elif not final:
                data = b""
            if not data:
                continue
            self.offsets[name] = offset + len(data)
            out.write(b"".join(self._lines(name, data)))
        out.flush()

    def _lines(self, name: str, data: bytes) -> Iterator[bytes]:
        if not self.prefix:
            yield data
            return
        for line in data.splitlines(keepends=True):
            yield name.encode() + b": " + (line if line.endswith(b"\n") else line + b"\n")


def _read_from(path: Path, offset: int) -> bytes:
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            return handle.read()
    except FileNotFoundError:
        return b""


def since_offset(path: Path, instance: str, since: float, events: list[RecordedEvent]) -> int:
    """Where the output of the processes alive at or after ``since`` begins in ``path``.

    Log lines carry no time, so the unit of selection is a process: a ``process`` event
    that records ``log_offset`` (the log's size when that process started) marks where
    its output begins; the first process still alive at ``since`` is the start. Without
    offsets the log file as a whole is the unit: all of it when it was written to since
    then (its modification time), none of it otherwise.
    """
    try:
        stat = path.stat()
    except FileNotFoundError:
        return 0
    if stat.st_mtime < since:
        return stat.st_size  # nothing was written since then
    starts: list[tuple[int, float | None]] = []  # (offset, end time or None while alive)
    for event in events:
        if not isinstance(event, ProcessStarted | UnitTransition) or event.instance != instance:
            continue
        if isinstance(event, ProcessStarted) and event.log_offset is not None:
            starts.append((event.log_offset, None))
        elif isinstance(event, UnitTransition) and event.exit and starts and starts[-1][1] is None:
            starts[-1] = (starts[-1][0], event.time)
    if starts:
        alive = [offset for offset, end in starts if end is None or end >= since]
        return min(alive[0], stat.st_size) if alive else stat.st_size
    return 0 if stat.st_mtime >= since else stat.st_size


def tail_offset(path: Path, start: int, lines: int) -> int:
    """The offset of the last ``lines`` lines of ``path`` at or after ``start``."""
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        return start
    with handle:
        end = handle.seek(0, os.SEEK_END)
        position, newlines = end, 0
        if lines == 0:
            return end
        while position > start:
            step = min(65536, position - start)
            position -= step
            handle.seek(position)
            block = handle.read(step)
            if position + step == end and block.endswith(b"\n"):
                block = block[:-1]  # the final newline ends the last line; it starts none
            for index in range(len(block) - 1, -1, -1):
                if block[index] == 0x0A:
                    newlines += 1
                    if newlines == lines:
                        return position + index + 1
        return start


async def _follow(reader: _LogReader, out: BinaryIO, unit: str) -> None:
    """Like ``tail -f`` until the run ends.

    The files may be written on other nodes through a shared file system, where no
    change notification reaches this node, so this polls (every 200 ms). Instances of a
    unit that start later are picked up as their log files appear.
    """
    while True:
        finished = reader.state.result.exists()
        for name in _log_names(reader.state, unit):
            reader.add(name, None, [], None)
        reader.emit(out, final=finished)
        if finished:
            return
        await trio.sleep(FOLLOW_INTERVAL)
