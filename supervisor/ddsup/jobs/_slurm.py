"""The Slurm commands a login node runs: ``sbatch``, ``squeue``, ``sacct``, ``scancel``.

Each is an argument vector (never a shell string) run with a deadline; what it prints
is parsed by ``_slurm_job``. A command that is missing, hangs or refuses raises
:class:`~ddsup._errors.SlurmError` with its own words, except where refusing is an
answer: ``squeue`` of a job slurmctld has forgotten, ``sacct`` without accounting.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ddsup._errors import SlurmError
from ddsup.jobs._slurm_job import (
    ACCOUNTING_FIELDS,
    QUEUE_FIELDS,
    SlurmJob,
    parse_accounting,
    parse_queue,
)
from ddsup.units import printable

TIMEOUT = 30.0  # seconds for one command: slurmctld under load answers within it
_SHOWN = 400  # characters of a command's complaint carried in an error
_JOB_ID = re.compile(r"[1-9][0-9]{0,9}")


def check_job_id(text: str) -> str:
    """``text`` when it is a job id (digits); ValueError otherwise."""
    if not _JOB_ID.fullmatch(text):
        raise ValueError(f"{printable(text)!r} is not a Slurm job id (digits, e.g. 4242)")
    return text


@dataclass(frozen=True)
class Accounting:
    """What ``sacct`` said: the jobs it knows, or why it could not say (no accounting)."""

    jobs: Mapping[str, SlurmJob]
    missing: str | None = None  # why there is no accounting view (None: there is one)


@dataclass(frozen=True)
class Slurm:
    """The commands, with the environment they run in (None: this process's)."""

    environ: Mapping[str, str] | None = None
    timeout: float = TIMEOUT

    def submit(self, script: Path, extra: Sequence[str] = ()) -> str:
        """``sbatch --parsable [extra…] SCRIPT``; the new job's id."""
        done = self._run(["sbatch", "--parsable", *extra, str(script)])
        if done.returncode != 0:
            raise SlurmError(f"sbatch refused the job: {_said(done)}")
        job_id = done.stdout.strip().split(";", 1)[0]
        try:
            return check_job_id(job_id)
        except ValueError:
            raise SlurmError(f"sbatch printed no job id: {_said(done)}") from None

    def queue(self, job_ids: Sequence[str]) -> dict[str, SlurmJob]:
        """slurmctld's view (``squeue --states=all``) of the jobs it still knows."""
        if not job_ids:
            return {}
        fields = ",".join(f"{name}:|" for name in QUEUE_FIELDS[:-1]) + f",{QUEUE_FIELDS[-1]}:"
        argv = ["squeue", "--noheader", "--states=all", f"--jobs={','.join(job_ids)}"]
        done = self._run([*argv, f"--Format={fields}"])
        if done.returncode != 0:
            if "Invalid job id" in done.stderr:
                return {}  # none of them is known any more
            raise SlurmError(f"squeue failed: {_said(done)}")
        return parse_queue(done.stdout, set(job_ids))

    def accounting(self, job_ids: Sequence[str]) -> Accounting:
        """slurmdbd's view (``sacct``), or why there is none (not configured, not up)."""
        if not job_ids:
            return Accounting({})
        argv = ["sacct", "--noheader", "--parsable2", "--allocations"]
        argv += [f"--jobs={','.join(job_ids)}", f"--format={','.join(ACCOUNTING_FIELDS)}"]
        try:
            done = self._run(argv)
        except SlurmError as err:
            return Accounting({}, str(err))
        if done.returncode != 0:
            return Accounting({}, f"sacct: {_said(done)}")
        return Accounting(parse_accounting(done.stdout, set(job_ids)))

    def cancel(self, job_id: str, *, signal: str | None = None, batch: bool = False) -> None:
        """``scancel [--batch] [--signal=SIG] JOB``: without a signal, the job ends."""
        argv = [
            "scancel",
            *(["--batch"] if batch else []),
            *([f"--signal={signal}"] if signal else []),
        ]
        done = self._run([*argv, check_job_id(job_id)])
        if done.returncode != 0:
            raise SlurmError(f"scancel failed: {_said(done)}")

    def _run(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                argv,
                capture_output=True,
                text=True,
                errors="replace",
                timeout=self.timeout,
                check=False,
                stdin=subprocess.DEVNULL,
                env=None if self.environ is None else dict(self.environ),
            )
        except FileNotFoundError:
            raise SlurmError(
                f"{argv[0]} is not installed here (not on PATH): run this on a login node "
                "of the cluster"
            ) from None
        except subprocess.TimeoutExpired:
            raise SlurmError(f"{argv[0]} did not answer within {self.timeout:g}s") from None
        except OSError as err:
            raise SlurmError(f"cannot run {argv[0]}: {err.strerror or err}") from None


def _said(done: subprocess.CompletedProcess[str]) -> str:
    """What a command said (its error output, else its output), on one line, bounded."""
    text = " ".join(
        (done.stderr.strip() or done.stdout.strip() or f"exit {done.returncode}").split()
    )
    return printable(text if len(text) <= _SHOWN else text[:_SHOWN] + "…")
