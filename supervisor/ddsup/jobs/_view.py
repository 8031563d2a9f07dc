"""One job as a user asks after it from the login node: Slurm's view and ddsup's, reconciled.

Slurm knows whether the job waits, runs or has ended; only ddsup's record (the state
directory on the shared file system) knows how the run inside it went. Neither alone
tells the truth: a job Slurm ran but whose record has no ``run.json`` for it ended
before ddsup started (a bad script, a ``scancel`` while it was pending); a record
without ``result.json`` whose job Slurm has ended was cut off (a lost node, the time
limit); a ``RUNNING`` job whose run has its result is only being torn down.

Whom to believe: slurmctld (``squeue --states=all``) while it knows the job; after that
``sacct`` where accounting is configured. Accounting lags behind: a job slurmctld has
forgotten that ``sacct`` still shows running has ended, and its record says how. A job
neither knows any more is read from its record alone. :func:`reconcile` is pure; the
commands that gather its inputs are in :func:`observe`.
"""

from __future__ import annotations

import contextlib
import enum
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from ddsup._errors import RunStateError, UntrustedRunError, UsageError
from ddsup.jobs._slurm import Slurm, check_job_id
from ddsup.jobs._slurm_job import SlurmJob, SlurmJobJson
from ddsup.jobs._submissions import Submission, SubmissionJson, recall
from ddsup.record import ATTEMPTS, Outcome, RunInfo, StateDir, check_private
from ddsup.units import printable

_HINT = "ddsup acts only on runs of yours (run it as the user who submitted the job)"


class Phase(str, enum.Enum):
    """Where a job is, both views taken together (``status --json``'s ``job.phase``)."""

    PENDING = "pending"  # waits for its first start
    REQUEUED = "requeued"  # an attempt ended, the next one waits
    STARTING = "starting"  # Slurm runs the batch script; ddsup has not started yet
    RUNNING = "running"  # ddsup runs
    ENDING = "ending"  # ddsup has ended; Slurm is ending the job
    FINISHED = "finished"  # ended, and ddsup recorded how
    NO_RUN = "ended_before_start"  # ended before ddsup started
    CUT_OFF = "cut_off"  # ended without ddsup recording how (a lost node, the limit)
    UNKNOWN = "unknown"  # Slurm no longer knows it, and ddsup never recorded it


@dataclass(frozen=True)
class JobRun:
    """The run one job's attempt recorded: the newest of its state directory (or of its
    ``attempts/``) whose ``run.json`` names the job."""

    state: StateDir
    info: RunInfo
    result: Outcome | None


class JobViewJson(TypedDict):
    """A :class:`JobView` in ``ddsup status --json`` and ``ddsup runs --json``."""

    job_id: str
    phase: str
    summary: str
    slurm: SlurmJobJson | None
    state_dir: str | None
    attempt: int | None
    submitted: SubmissionJson | None
    notes: list[str]


@dataclass(frozen=True)
class JobView:
    """A job, its Slurm state and its run, and one line that says what is true now."""

    job_id: str
    phase: Phase
    summary: str
    slurm: SlurmJob | None
    run: JobRun | None
    submission: Submission | None
    notes: tuple[str, ...] = ()  # where the answer came from, when it matters

    def to_json(self) -> JobViewJson:
        submission = self.submission
        return {
            "job_id": self.job_id,
            "phase": self.phase.value,
            "summary": self.summary,
            "slurm": None if self.slurm is None else self.slurm.to_json(),
            "state_dir": None if self.run is None else str(self.run.state.path),
            "attempt": None if self.run is None else self.run.info.attempt,
            "submitted": None if submission is None else submission.to_json(),
            "notes": list(self.notes),
        }


_REASONS = {
    "Resources": "waits for nodes to be free",
    "Priority": "other jobs go first",
    "BeginTime": "waits for its start time",
    "Dependency": "waits for the jobs it depends on",
    "DependencyNeverSatisfied": "its dependency can never be met: cancel it",
    "JobHeldUser": "held by its user: scontrol release JOB",
    "JobHeldAdmin": "held by an administrator",
    "ReqNodeNotAvail": "the nodes it asks for are not available",
    "PartitionConfig": "the partition cannot run it as asked (nodes, GPUs, time?)",
    "PartitionNodeLimit": "it asks for more nodes than the partition allows",
    "PartitionTimeLimit": "its time limit is over the partition's",
    "QOSMaxJobsPerUserLimit": "you have as many jobs running as the QOS allows",
    "AssocGrpGRES": "your account's GPU limit is reached",
    "NodeDown": "a node it needs is down",
}


def explain(reason: str | None) -> str:
    """A pending job's reason, said (Slurm's word kept in brackets)."""
    if reason is None:
        return "waits"
    said = _REASONS.get(reason)
    return f"{said} ({reason})" if said else f"waits ({reason})"


def reconcile(
    job_id: str,
    slurm: SlurmJob | None,
    run: JobRun | None,
    *,
    forgotten: bool = False,
    batch_output: Path | None = None,
) -> tuple[Phase, str]:
    """What is true of the job now, from Slurm's view and the run's record.

    ``slurm``: the view to believe (squeue's while it knows the job, else sacct's);
    ``forgotten``: slurmctld no longer knows the job, so whatever ``slurm`` (sacct) says
    that is not an end is accounting lagging behind: the job has ended.
    """
    if slurm is not None and not (forgotten and not slurm.terminal):
        return _with_slurm(slurm, run, batch_output)
    if run is not None and run.result is not None:
        return Phase.FINISHED, f"{_outcome(run.result)} (Slurm no longer lists the job)"
    if run is not None:
        return Phase.CUT_OFF, (
            "Slurm no longer lists the job and ddsup's record has no result: the run "
            "was cut off (a lost node, the time limit, SIGKILL)"
        )
    return Phase.UNKNOWN, (
        f"Slurm does not know job {job_id} (any more), and ddsup never started in it"
    )


def _with_slurm(slurm: SlurmJob, run: JobRun | None, output: Path | None) -> tuple[Phase, str]:
    state = slurm.state
    if slurm.waiting:
        if slurm.restarts or state != "PENDING" or (run and _requeued(run.result)):
            last = f"; attempt {run.info.attempt} ended {_outcome(run.result)}" if run else ""
            return Phase.REQUEUED, f"requeued: the next attempt {explain(slurm.reason)}{last}"
        return Phase.PENDING, f"pending: {explain(slurm.reason)}"
    if not slurm.terminal:
        on = f" on {slurm.nodes}" if slurm.nodes else ""
        since = f" since {slurm.started}" if slurm.started else ""
        if run is None:
            where = f"; its output: {output}" if output else ""
            return Phase.STARTING, f"{state}{on}{since}: ddsup has not started yet{where}"
        if run.result is not None:
            return (
                Phase.ENDING,
                f"ddsup has ended ({_outcome(run.result)}); Slurm is ending the job ({state})",
            )
        return Phase.RUNNING, f"{state}{on}{since}"
    ended = _ended(slurm)
    if run is not None and run.result is not None:
        return Phase.FINISHED, f"{ended}: {_outcome(run.result)}"
    if run is not None:
        return Phase.CUT_OFF, f"{ended}: {_cut_off(slurm)}"
    where = f"; its output: {output}" if output else ""
    return Phase.NO_RUN, f"{ended} before ddsup started{where}"


def _requeued(result: Outcome | None) -> bool:
    return result is not None and result.status.value == "requeued"


def _ended(slurm: SlurmJob) -> str:
    how = slurm.state
    if slurm.signal is not None:
        how += f", signal {slurm.signal}"
    elif slurm.exit_code is not None and slurm.state != "CANCELLED":
        how += f", exit {slurm.exit_code}"
    return how + (f" on {slurm.nodes}" if slurm.state == "NODE_FAIL" and slurm.nodes else "")


def _cut_off(slurm: SlurmJob) -> str:
    why = {
        "NODE_FAIL": "a node of the job failed, and Slurm ended the job",
        "TIMEOUT": "the time limit came, and Slurm killed the job",
        "CANCELLED": "the job was cancelled (scancel), and killed",
        "PREEMPTED": "the job was preempted",
        "OUT_OF_MEMORY": "a step ran out of memory",
    }.get(slurm.state, "the job ended")
    return f"{why} before ddsup recorded how the run ended"


def _outcome(result: Outcome | None) -> str:
    if result is None:
        return "without a result"
    who = f"{result.unit}: " if result.unit else ""
    first = result.reason.splitlines()[0] if result.reason else ""
    return f"{result.status.value}, exit {result.exit_code} ({who}{first})"


# --- gathering the inputs -----------------------------------------------------------------
def observe(job_id: str, state_dir: Path | None = None, slurm: Slurm | None = None) -> JobView:
    """Ask Slurm and read the record: job ``job_id`` as it is now.

    Its state directory is ``state_dir`` when given (a job submitted by hand), else the
    one ``ddsup submit`` recorded (UsageError when there is neither).
    """
    try:
        check_job_id(job_id)
    except ValueError as err:
        raise UsageError(f"--job: {err}") from None
    submission = recall(job_id)
    if state_dir is None:
        if submission is None:
            raise UsageError(
                f"no record of job {job_id}: ddsup submit did not submit it as you on "
                "this machine; pass --state-dir too (the directory its ddsup start writes)"
            )
        state_dir = Path(submission.state_dir)
    run = find_job_run(Path(os.path.abspath(state_dir)), job_id)
    slurm = slurm or Slurm()
    known = slurm.queue([job_id]).get(job_id)
    notes: list[str] = []
    forgotten = known is None
    if known is None:
        accounting = slurm.accounting([job_id])
        known = accounting.jobs.get(job_id)
        if accounting.missing:
            notes.append(f"no accounting to ask ({accounting.missing})")
        elif known is not None and not known.terminal:
            notes.append(f"accounting still says {known.state}: it lags behind slurmctld")
    output = _existing(submission.batch_output) if submission is not None else None
    phase, text = reconcile(job_id, known, run, forgotten=forgotten, batch_output=output)
    return JobView(job_id, phase, text, known, run, submission, tuple(notes))


def job_view(submission: Submission, slurm: SlurmJob | None) -> JobView:
    """A recorded job from what ``squeue`` said of it (None: slurmctld has forgotten it;
    accounting is not asked: ``ddsup runs`` asks once for every job). A record that is
    not the caller's reads as no run."""
    try:
        run = find_job_run(Path(submission.state_dir), submission.job_id)
    except UntrustedRunError:
        run = None
    output = _existing(submission.batch_output)
    phase, text = reconcile(submission.job_id, slurm, run, batch_output=output)
    return JobView(submission.job_id, phase, text, slurm, run, submission)


def _existing(path: Path) -> Path | None:
    return path if path.exists() else None


def find_job_run(state_dir: Path, job_id: str) -> JobRun | None:
    """The newest run of job ``job_id`` in ``state_dir``: its own record, or one of its
    ``attempts/`` (the job was submitted again since, or requeued before).

    Only records of the caller's are read (UntrustedRunError otherwise): the directory,
    its ``run.json`` and ``logs/`` must be theirs, and nobody else's to write.
    """
    for candidate in [state_dir, *_attempts(state_dir)]:
        state = StateDir(candidate)
        try:
            check_private(candidate, directory=True, error=UntrustedRunError, hint=_HINT)
            check_private(state.run, directory=False, error=UntrustedRunError, hint=_HINT)
            info = state.read_run()
        except FileNotFoundError:
            continue
        except RunStateError as err:
            if isinstance(err, UntrustedRunError):
                raise
            continue  # a torn or foreign run.json: not this job's record
        if info.job == job_id:
            if os.path.lexists(state.logs):
                check_private(state.logs, directory=True, error=UntrustedRunError, hint=_HINT)
            return JobRun(state, info, _result(state))
    return None


def _result(state: StateDir) -> Outcome | None:
    try:
        return state.read_result()
    except RunStateError:  # torn or foreign: not a result ddsup can vouch for
        return None


def _attempts(state_dir: Path) -> list[Path]:
    """``attempts/<N>`` of ``state_dir``, the newest (highest N) first."""
    with contextlib.suppress(OSError):
        names = [n for n in os.listdir(state_dir / ATTEMPTS) if n.isdigit()]
        return [state_dir / ATTEMPTS / n for n in sorted(names, key=int, reverse=True)]
    return []


def tail(path: Path, lines: int = 8, limit: int = 64 * 1024) -> list[str]:
    """The last ``lines`` lines of ``path`` (a batch output), printable; none when absent."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - limit))
            data = handle.read()
    except OSError:
        return []
    text = data.decode("utf-8", errors="replace")
    return [printable(line) for line in text.splitlines()[-lines:]]
