"""Slurm's view of one job, as ``squeue`` or ``sacct`` print it: parsed, never trusted blind.

Both are asked for delimited fields (``squeue --Format`` with ``|`` after each field,
``sacct --parsable2``); a line that does not have them, or names a job that was not
asked for, is skipped. The job's name comes last on a ``squeue`` line, since it is the
one field a user writes.

``squeue --states=all`` knows a job from its submission until ``MinJobAge`` after its
end (slurmctld then forgets it); ``sacct`` knows it for good where accounting is
configured, but a little late (slurmdbd is written to behind slurmctld's back).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import TypedDict

from ddsup.units import printable

QUEUE_FIELDS = (
    "JobID", "State", "Reason", "exit_code", "RestartCnt", "NodeList", "StartTime", "EndTime",
    "BatchHost", "UserName", "Name",
)  # fmt: skip
ACCOUNTING_FIELDS = ("JobID", "State", "ExitCode", "Reason", "NodeList", "Start", "End", "User")

TERMINAL = frozenset(
    {
        "BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL",
        "OUT_OF_MEMORY", "PREEMPTED", "REVOKED", "TIMEOUT",
    }
)  # fmt: skip
"""States after which the job (this attempt of it) runs nothing any more."""
WAITING = frozenset(
    {"PENDING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESV_DEL_HOLD", "SPECIAL_EXIT"}
)
"""States of a job that waits to run (again): nothing of it runs now."""
_NOTHING = frozenset({"", "None", "(null)", "N/A", "NONE", "Unknown", "n/a"})


class SlurmJobJson(TypedDict):
    """A :class:`SlurmJob` in ``ddsup status --json`` and ``ddsup runs --json``."""

    job_id: str
    state: str
    source: str
    reason: str | None
    exit_code: int | None
    signal: int | None
    restarts: int
    nodes: str | None
    started: str | None
    ended: str | None
    batch_host: str | None


@dataclass(frozen=True)
class SlurmJob:
    """One job as Slurm reports it; ``source`` says who did (``squeue`` or ``sacct``)."""

    job_id: str
    state: str  # Slurm's word, upper case: PENDING, RUNNING, COMPLETING, CANCELLED, …
    source: str
    reason: str | None = None
    exit_code: int | None = None  # the batch script's exit status
    signal: int | None = None  # or the signal that ended it
    restarts: int = 0  # how often it was requeued (squeue only)
    nodes: str | None = None  # a nodelist expression: n[1-3]
    started: str | None = None  # as Slurm prints it: 2026-12-06T20:15:10
    ended: str | None = None
    batch_host: str | None = None
    user: str | None = None
    name: str | None = None

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL

    @property
    def waiting(self) -> bool:
        return self.state in WAITING

    def to_json(self) -> SlurmJobJson:
        return {
            "job_id": self.job_id,
            "state": self.state,
            "source": self.source,
            "reason": self.reason,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "restarts": self.restarts,
            "nodes": self.nodes,
            "started": self.started,
            "ended": self.ended,
            "batch_host": self.batch_host,
        }


def parse_queue(text: str, wanted: Collection[str]) -> dict[str, SlurmJob]:
    """``squeue --noheader --Format=<QUEUE_FIELDS, each followed by |>`` → job id → job."""
    jobs: dict[str, SlurmJob] = {}
    for fields in _rows(text, "|", len(QUEUE_FIELDS), wanted):
        job_id, state, reason, status, restarts, nodes, start, end, host, user, name = fields
        code, sig = _wait_status(status)
        jobs[job_id] = SlurmJob(
            job_id=job_id,
            state=_state(state),
            source="squeue",
            reason=_value(reason),
            exit_code=code,
            signal=sig,
            restarts=int(restarts) if restarts.isdigit() else 0,
            nodes=_value(nodes),
            started=_value(start),
            ended=_value(end),
            batch_host=_value(host),
            user=_value(user),
            name=_value(name),
        )
    return jobs


def parse_accounting(text: str, wanted: Collection[str]) -> dict[str, SlurmJob]:
    """``sacct --noheader --parsable2 --allocations --format=<ACCOUNTING_FIELDS>`` → job
    id → job (the newest line of a job wins: a requeued job has one per run)."""
    jobs: dict[str, SlurmJob] = {}
    for fields in _rows(text, "|", len(ACCOUNTING_FIELDS), wanted):
        job_id, state, exit_code, reason, nodes, start, end, user = fields
        code, _, sig = exit_code.partition(":")
        jobs[job_id] = SlurmJob(
            job_id=job_id,
            state=_state(state),
            source="sacct",
            reason=_value(reason),
            exit_code=int(code) if code.isdigit() else None,
            signal=int(sig) if sig.isdigit() and int(sig) else None,
            nodes=_value(nodes),
            started=_value(start),
            ended=_value(end),
            user=_value(user),
        )
    return jobs


def _rows(text: str, sep: str, count: int, wanted: Collection[str]) -> Iterator[list[str]]:
    for line in text.splitlines():
        fields = [f.strip() for f in line.split(sep, count - 1)]
        if len(fields) == count and fields[0] in wanted:
            yield fields


def _state(word: str) -> str:
    """``CANCELLED by 0`` (sacct) → ``CANCELLED``; ``COMPLETED+`` → ``COMPLETED``."""
    first = word.split(" ", 1)[0].rstrip("+").upper()
    return printable(first) or "UNKNOWN"


def _value(text: str) -> str | None:
    return None if text in _NOTHING else printable(text)


def _wait_status(text: str) -> tuple[int | None, int | None]:
    """squeue's ``exit_code`` is the batch script's wait status: 768 is exit 3, 15 is
    SIGTERM."""
    if not text.isdigit():
        return None, None
    status = int(text)
    if status & 0x7F:
        return None, status & 0x7F
    return status >> 8, None
