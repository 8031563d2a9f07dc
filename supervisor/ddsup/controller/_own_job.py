"""What the run asks Slurm about its own job: when it ends, and to requeue it.

- **End time.** ``squeue -h -o %e -j $SLURM_JOB_ID`` (Slurm prints local time,
  ``2026-12-03T04:14:06``; a job without a limit has none). Asked at the start, every
  :data:`REFRESH` seconds (an administrator may change the limit: Slurm has no event to
  wait on for that) and again right before a ``stop_before_end`` stop.
- **Requeue.** A worker that exits with :data:`~ddsup._errors.EXIT_REQUEUE` asks for
  it. Once everything has stopped, ``scontrol requeue $SLURM_JOB_ID`` puts the job back
  in the queue, if the job allows it (``Requeue=1`` in ``scontrol show job``: ``sbatch
  --requeue`` or the cluster's ``JobRequeue=1``). Slurm then ends this attempt and starts
  the next one with ``SLURM_RESTART_COUNT`` one higher (:func:`attempt_of`).

Every call is bounded and never raises: a missing or failing client means "unknown".
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from dataclasses import replace

import trio

from ddsup._errors import EXIT_REQUEUE, ResultStatus
from ddsup.controller._run_facts import attempt_of as attempt_of
from ddsup.process import fork_lock
from ddsup.record import Outcome
from ddsup.units import printable

REFRESH = 300.0  # seconds between looks at the job's end time
CLIENT_TIMEOUT = 30.0


def parse_end_time(text: str) -> float | None:
    """Unix time of squeue's ``%e`` (local time); None for ``N/A``, ``Unknown``, ``NONE``…"""
    line = text.strip().splitlines()[0].strip() if text.strip() else ""
    try:
        return time.mktime(time.strptime(line, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


async def job_end_time(job_id: str) -> float | None:
    """When the job's time limit ends it (Unix time), or None when unknown or unlimited."""
    out = await _client(["squeue", "-h", "-o", "%e", "-j", job_id])
    return None if out is None else parse_end_time(out)


async def requeue(job_id: str) -> str | None:
    """Requeue the job; None when done, else why not (for ``result.json``)."""
    shown = await _client(["scontrol", "show", "job", "-o", job_id])
    if shown is None:
        return f"scontrol show job {job_id} failed"
    if re.search(r"(?:^|\s)Requeue=0(?:\s|$)", shown):
        return "the job does not allow it (Requeue=0: submit it with sbatch --requeue)"
    done = await _run(["scontrol", "requeue", job_id])
    if isinstance(done, str):
        return done
    return None


async def settle_requeue(outcome: Outcome, job_id: str | None) -> Outcome:
    """A worker asked for a requeue (``outcome`` is ``requeued``): do it, or say why not.

    Called once everything has stopped. Not possible (no Slurm job, ``Requeue=0``, the
    command failed): the run ended as the worker's failure, the reason says why.
    """
    why = "this run is not in a Slurm job" if not job_id else await requeue(job_id)
    if why is None:
        return replace(outcome, reason=f"{outcome.reason}; the job was requeued")
    return replace(
        outcome,
        status=ResultStatus.WORKER_FAILED,
        reason=f"{outcome.reason}: it asked for a requeue (exit status {EXIT_REQUEUE}), but {why}",
    )


async def _client(argv: list[str]) -> str | None:
    done = await _run(argv)
    return None if isinstance(done, str) else done.stdout.decode(errors="replace")


async def _run(argv: list[str]) -> subprocess.CompletedProcess[bytes] | str:
    """The finished command, or why it failed (not installed, timed out, exit status)."""
    program = shutil.which(argv[0])
    if program is None:
        return f"{argv[0]} is not on PATH"
    finished: list[subprocess.CompletedProcess[bytes]] = []

    async def run(task_status: trio.TaskStatus[trio.Process]) -> None:
        command = [program, *argv[1:]]
        finished.append(
            await trio.run_process(
                command,
                capture_stdout=True,
                capture_stderr=True,
                check=False,
                task_status=task_status,
            )
        )

    with trio.move_on_after(CLIENT_TIMEOUT):
        # forked under the lock (not while a unit's fork sits in its cgroup), then waited
        async with trio.open_nursery() as nursery, fork_lock():
            await nursery.start(run)
        (done,) = finished
        if done.returncode != 0:
            why = done.stderr.decode(errors="replace").strip() or f"exit {done.returncode}"
            return f"{' '.join(argv)} failed: {printable(why)}"
        return done
    return f"{' '.join(argv)} did not answer within {CLIENT_TIMEOUT:g}s"
