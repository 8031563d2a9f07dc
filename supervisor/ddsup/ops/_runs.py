"""``ddsup runs`` and ``ddsup prune``: the runs in a directory, and removing finished ones.

A run is a state directory ``ddsup-*`` with a ``run.json`` (what ``status``, ``logs`` and
``stop`` find). It is **finished** once it has its ``result.json``: ``ddsup start``
writes that last, after every process of the run has been stopped and swept, so a
finished run's directory is no longer written to and may be removed. A run without one
is live, or was killed before it could write it (SIGKILL, a lost node): ``prune`` never
touches it, since nothing here can tell a live run on another node from a dead one.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypedDict

from ddsup import jobs
from ddsup._errors import RunStateError, SlurmError, UsageError
from ddsup.ops._run_handle import one_line, silence_stdout
from ddsup.record import Outcome, OutcomeJson, StateDir, duration, run_dirs
from ddsup.units import parse_duration, printable

_DAY = 86400.0


class RunEntryJson(TypedDict):
    """One run of ``ddsup runs --json`` (:class:`RunEntry`; docs/cli.md)."""

    state_dir: str
    invocation_id: str | None
    unit_dir: str | None
    started_at: float | None
    ended_at: float | None
    finished: bool
    result: OutcomeJson | None
    job: jobs.JobViewJson | None  # ``ddsup.jobs``' view of its Slurm job


@dataclass(frozen=True)
class RunEntry:
    """One run as ``ddsup runs`` lists it; ``job``: the Slurm job ``ddsup submit``
    submitted it as, and what is true of that job now."""

    state: StateDir
    invocation_id: str | None
    unit_dir: str | None
    started_at: float | None
    result: Outcome | None
    ended_at: float | None  # when result.json was written
    job: jobs.JobView | None = None

    @property
    def finished(self) -> bool:
        return self.result is not None

    def to_json(self) -> RunEntryJson:
        return {
            "state_dir": str(self.state.path),
            "invocation_id": self.invocation_id,
            "unit_dir": self.unit_dir,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "finished": self.finished,
            "result": None if self.result is None else self.result.to_dict(),
            "job": None if self.job is None else self.job.to_json(),
        }


def find_runs(base: Path) -> list[RunEntry]:
    """Every run in ``base``, newest first (by when it started); unreadable ones included."""
    entries = [_entry(StateDir(path.absolute())) for path in run_dirs(base)]
    return sorted(entries, key=lambda e: e.started_at or 0.0, reverse=True)


def with_jobs(runs: list[RunEntry], slurm: jobs.Slurm | None = None) -> list[RunEntry]:
    """``runs`` and the runs of the jobs ``ddsup submit`` submitted (one row per job, a
    job's run joining its row here), newest first. Slurm is asked once for all of them;
    without an answer, each job is read from its record alone."""
    records = jobs.submissions()
    if not records:
        return runs
    try:
        known = (slurm or jobs.Slurm()).queue([r.job_id for r in records])
    except SlurmError:
        known = {}
    rows = list(runs)
    for record in records:
        view = jobs.job_view(record, known.get(record.job_id))
        index = next((i for i, run in enumerate(rows) if _its_run(run, view)), None)
        if index is None:
            rows.append(_job_entry(view, record))
        else:
            rows[index] = replace(rows[index], job=view)
    return sorted(rows, key=_when, reverse=True)


def _its_run(run: RunEntry, view: jobs.JobView) -> bool:
    """Whether ``run`` (listed here) is the run of the job ``view`` shows."""
    return (
        run.job is None
        and view.run is not None
        and run.invocation_id == view.run.info.invocation_id
        and run.state.path == view.run.state.path
    )


def _job_entry(view: jobs.JobView, record: jobs.Submission) -> RunEntry:
    if view.run is None:
        state = StateDir(Path(record.state_dir))
        return RunEntry(state, None, record.unit_dir, None, None, None, view)
    return replace(_entry(view.run.state), job=view)


def _when(run: RunEntry) -> float:
    submitted = run.job.submission.submitted_at if run.job and run.job.submission else 0.0
    return run.started_at or submitted


def _entry(state: StateDir) -> RunEntry:
    invocation: str | None = None
    unit_dir: str | None = None
    try:
        info = state.read_run()
        invocation, unit_dir, started = info.invocation_id, info.unit_dir, info.started_at
    except RunStateError:
        started = _mtime(state.run)
    try:
        result = state.read_result()
    except RunStateError:  # torn or foreign: not a result ddsup can vouch for
        result = None
    ended = _mtime(state.result) if result is not None else None
    return RunEntry(state, invocation, unit_dir, started, result, ended)


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


# --- ddsup runs ---------------------------------------------------------------------------
def configure_runs(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "List the runs (state directories ddsup-*) in a directory, newest first, with "
        "when they ran and how they ended."
    )
    _add_base(parser)
    parser.add_argument("--json", action="store_true", help="one JSON object per run, as a list")


def run_runs(args: argparse.Namespace) -> int:
    runs = with_jobs(find_runs(args.base))
    if args.json:
        text = json.dumps([r.to_json() for r in runs], indent=2, sort_keys=True)
    elif not runs:
        text = (
            f"no runs in {printable(str(args.base))} (state directories ddsup-*), and no "
            "jobs submitted with ddsup submit"
        )
    else:
        text = _table(runs, args.base, time.time())
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        silence_stdout()
    return 0


def _table(runs: list[RunEntry], base: Path, now: float) -> str:
    rows: list[tuple[str, ...]] = [("STATE DIR", "STARTED", "RAN", "OUTCOME", "UNITS")]
    rows += [_row(run, base, now) for run in runs]
    if any(run.job is not None for run in runs):  # the job and Slurm's word after the dir
        rows = [(rows[0][0], "JOB", "SLURM", *rows[0][1:])] + [
            (row[0], *_job_cells(run), *row[1:]) for row, run in zip(rows[1:], runs, strict=True)
        ]
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def _job_cells(run: RunEntry) -> tuple[str, str]:
    job = run.job
    if job is None:
        return "-", "-"
    state = job.slurm.state if job.slurm is not None else "(gone)"
    if job.slurm is not None and job.slurm.waiting and job.slurm.reason:
        state += f" ({job.slurm.reason})"
    return job.job_id, state


def _row(run: RunEntry, base: Path, now: float) -> tuple[str, ...]:
    started = run.started_at
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(started)) if started else "-"
    ran = duration(run.ended_at - started) if run.ended_at and started else "-"
    if run.job is not None and run.job.phase is not jobs.Phase.FINISHED:
        outcome = run.job.summary  # Slurm's view with the record's: what is true now
    elif run.result is not None:
        who = f"{run.result.unit}: " if run.result.unit else ""
        outcome = f"{run.result.status.value}, exit {run.result.exit_code} ({who}{one_line(run.result.reason)})"
    else:
        outcome = f"no result: live, or killed (up {duration(now - started)}?)" if started else "-"
    name = printable(str(_relative(run.state.path, base)))
    return name, when, ran, outcome, printable(run.unit_dir or "-")


def _relative(path: Path, base: Path) -> Path:
    try:
        return path.relative_to(base.absolute())
    except ValueError:
        return path


# --- ddsup prune --------------------------------------------------------------------------
def configure_prune(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Remove the state directories of finished runs (those with a result.json). A run "
        "without one (live, or killed before it could write it) is never removed. With "
        "both options, a run is removed when it is outside the newest N and older than AGE."
    )
    _add_base(parser)
    parser.add_argument(
        "--keep", type=int, metavar="N", help="keep the N newest finished runs (default: all)"
    )
    parser.add_argument(
        "--older-than",
        metavar="AGE",
        help="remove only runs that ended more than AGE ago: 30m, 12h, 7d (default: any age)",
    )
    parser.add_argument(
        "-n", "--dry-run", action="store_true", help="say what would be removed, remove nothing"
    )


def run_prune(args: argparse.Namespace) -> int:
    if args.keep is None and args.older_than is None:
        raise UsageError("say which runs to remove: --keep N and/or --older-than AGE")
    if args.keep is not None and args.keep < 0:
        raise UsageError(f"--keep must be 0 or more (got {args.keep})")
    age = None if args.older_than is None else parse_age(args.older_than)
    runs = find_runs(args.base)
    doomed = prunable(runs, keep=args.keep, older_than=age, now=time.time())
    verb = "would remove" if args.dry_run else "removed"
    for run in doomed:
        if not args.dry_run:
            _remove(run.state.path)
        assert run.result is not None
        print(
            f"{verb} {printable(str(_relative(run.state.path, args.base)))} "
            f"({run.result.status.value}, exit {run.result.exit_code})"
        )
    live = sum(1 for r in runs if not r.finished)
    kept = len(runs) - len(doomed) - live
    print(
        f"{verb} {len(doomed)} run{'s' * (len(doomed) != 1)}; kept {kept} finished, "
        f"{live} without a result (live or killed: never removed)",
        file=sys.stderr,
    )
    return 0


def prunable(
    runs: list[RunEntry], *, keep: int | None, older_than: float | None, now: float
) -> list[RunEntry]:
    """The finished runs to remove from ``runs`` (newest first), by the two rules."""
    finished = [r for r in runs if r.finished]
    candidates = finished[keep:] if keep is not None else finished
    if older_than is not None:
        candidates = [
            r for r in candidates if r.ended_at is not None and now - r.ended_at > older_than
        ]
    return candidates


def parse_age(text: str) -> float:
    """``--older-than``: a duration (``30m``, ``12h``) or whole days (``7d``)."""
    stripped = text.strip()
    if stripped.endswith("d") and stripped[:-1].strip().isdigit():
        return int(stripped[:-1]) * _DAY
    try:
        return parse_duration(stripped)
    except ValueError as err:
        raise UsageError(f"--older-than {text!r}: {err} (or days: 7d)") from None


def _remove(path: Path) -> None:
    """Remove one state directory; never through a symlink (the name could be swapped)."""
    if path.is_symlink() or not path.is_dir():
        raise RunStateError(f"{path} is not a state directory: not removed")
    shutil.rmtree(path)


def _add_base(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--in",
        dest="base",
        type=Path,
        default=Path("."),
        metavar="DIR",
        help="where the state directories are (default: the current directory)",
    )
