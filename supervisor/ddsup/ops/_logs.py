"""``ddsup logs``: instances' output, whole, since a time, the last lines, or followed.

Which logs (``_log_names``) and from where (``--since``, ``-n``) are decided here; the
reading itself, across rotated files and while following, is ``_log_reader``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import sys
import time
from pathlib import Path
from typing import Any, BinaryIO

import trio

from ddsup import jobs
from ddsup._errors import RunStateError, UsageError
from ddsup.ops._log_reader import LogReader, start_points
from ddsup.ops._run_handle import add_state_dir, events_of, find_job, find_state, silence_stdout
from ddsup.record import ProcessStarted, RecordedEvent, StateDir, UnitTransition
from ddsup.record import tail_offset as tail_offset
from ddsup.units import parse_duration, printable

FOLLOW_INTERVAL = 0.2


# --- logs --------------------------------------------------------------------------------
DESCRIPTION = """\
Print the output of unit instances from the run's state directory (logs/<instance>.log,
and the rotated files before it). UNIT is an instance (lane@3, lane@0:1, worker) or a
unit (lane: all its instances); without UNIT, every instance of the run, each line
prefixed by its instance (coloured on a terminal). With -f, new lines are printed as
they come, interleaved across instances, until the run ends. With --job, a job that
ddsup has not started in (yet) shows its batch script's output instead."""


def configure_logs(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    add_state_dir(parser)
    parser.add_argument(
        "unit",
        metavar="UNIT",
        nargs="?",
        help="an instance (lane@3) or a unit (lane: all its instances); default: all",
    )
    parser.add_argument(
        "-f", "--follow", action="store_true", help="keep printing new lines until the run ends"
    )
    parser.add_argument(
        "--since",
        metavar="WHEN",
        help="only output of processes alive since WHEN: a duration (10m) or an ISO time "
        "(default: all)",
    )
    parser.add_argument(
        "-n",
        "--lines",
        type=int,
        metavar="N",
        help="only the last N lines of each log (default: all)",
    )


def run_logs(args: argparse.Namespace) -> int:
    job = find_job(args)
    if job is not None and job.run is None:
        return _batch_output(job, args.lines)
    state = job.run.state if job is not None and job.run is not None else find_state(args)
    since = parse_since(args.since) if args.since else None
    if args.lines is not None and args.lines < 0:
        raise UsageError("--lines must be 0 or more")
    names = _log_names(state, args.unit)
    if not names and args.unit is not None and args.follow and _before_plan(state):
        # Followed as soon as the job runs, the run may not have planned yet: which names
        # it will have is not known, so wait for them rather than refuse one.
        print(f"ddsup: no plan yet; waiting for {printable(repr(args.unit))}", file=sys.stderr)
        try:
            names = trio.run(_names_to_come, state, args.unit)
        except KeyboardInterrupt:
            return 130
    if not names and args.unit is not None:
        known = ", ".join(sorted(_listed(state), key=_natural)) or "none yet"
        raise UsageError(f"no log for {printable(repr(args.unit))}; known: {known}")
    several = args.unit is None or len(names) > 1 or args.unit.endswith("@")
    reader = LogReader(prefix=several, colour=several and colour_wanted(sys.stdout))
    events = events_of(state) if since is not None else []
    for name in names:
        _add(reader, state, name, since, events, args.lines)
    out = sys.stdout.buffer
    try:
        reader.emit(out, final=not args.follow)
        if args.follow:
            trio.run(_follow, reader, out, state, args.unit)
    except BrokenPipeError:
        silence_stdout()
    except KeyboardInterrupt:
        return 130
    finally:
        reader.close()
    return 0


def _batch_output(job: jobs.JobView, lines: int | None) -> int:
    """A job ddsup has not started in (yet): what its batch script wrote, which says why
    when it ended before (its ``#SBATCH --output``, in the state directory)."""
    output = job.submission.batch_output if job.submission is not None else None
    if output is None or not output.exists():
        raise RunStateError(f"job {job.job_id} has no run and no output (yet): {job.summary}")
    print(f"ddsup: job {job.job_id}: {job.summary}", file=sys.stderr)
    with open(output, "rb") as handle:
        data = handle.read()
    if lines is not None:
        data = b"".join(data.splitlines(keepends=True)[-lines:] if lines else [])
    try:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    except BrokenPipeError:
        silence_stdout()
    return 0


def _add(
    reader: LogReader,
    state: StateDir,
    name: str,
    since: float | None,
    events: list[RecordedEvent],
    lines: int | None,
) -> None:
    path = state.log(name)
    start = 0 if since is None else since_offset(path, name, since, events)
    offset, older = start_points(path, start, lines)
    reader.add(name, path, offset, older)


def colour_wanted(stream: Any) -> bool:
    """Colour only for a person at a terminal (https://no-color.org)."""
    tty = bool(getattr(stream, "isatty", lambda: False)())
    return tty and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"


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


def _log_names(state: StateDir, name: str | None) -> list[str]:
    """``lane@3`` (an instance, rank ``lane@3:1``, ``agent-n1``), ``lane``/``lane@`` (all of
    a unit), or None: every instance of the run (planned, or with a log), in plan order.

    Only names of the run count: planned instances, and the logs that ``logs/`` lists.
    A name is never joined to a path as given, so ``../../x`` names nothing.
    """
    planned = _planned(state)
    if name is None:
        logged = {n for n in _listed(state) if not n.startswith("agent")}
        return planned + sorted(logged - set(planned), key=_natural)
    known = set(planned) | _listed(state)
    if name in known:
        return [name]
    base = name.rstrip("@")
    return sorted((i for i in known if i.startswith(f"{base}@")), key=_natural)


def _before_plan(state: StateDir) -> bool:
    """A run that has written neither its plan nor its result: its names are to come."""
    return not state.plan.exists() and not state.result.exists()


async def _names_to_come(state: StateDir, unit: str) -> list[str]:
    """``unit``'s names once the run has a log of it, a plan, or a result (polled, as
    :func:`_follow` does)."""
    while True:
        names = _log_names(state, unit)
        if names or not _before_plan(state):
            return names
        await trio.sleep(FOLLOW_INTERVAL)


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
        if not alive:
            return stat.st_size
        # an offset past the end: the log was rotated since that process began, so all of
        # the current file is newer (the rotated files are not searched)
        return alive[0] if alive[0] <= stat.st_size else 0
    return 0 if stat.st_mtime >= since else stat.st_size


async def _follow(reader: LogReader, out: BinaryIO, state: StateDir, unit: str | None) -> None:
    """Like ``tail -F`` until the run ends.

    The files may be written on other nodes through a shared file system, where no
    change notification reaches this node, so this polls (every 200 ms). Instances that
    start later are picked up as their log files appear.
    """
    while True:
        finished = state.result.exists()
        for name in _log_names(state, unit):
            if name not in reader.names:
                reader.add(name, state.log(name))
        reader.emit(out, final=finished)
        if finished:
            return
        await trio.sleep(FOLLOW_INTERVAL)
