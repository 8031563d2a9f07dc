"""What ``ddsup submit`` remembers of each job it submitted: where its state will be.

One file per job, ``<job id>.json``, in the user's state directory
(``${XDG_STATE_HOME:-~/.local/state}/ddsup/jobs``, 0700, each file 0600): the job's
name, unit and state directories, the batch script, the profile and when. ``--job ID``
finds a run through it, and ``ddsup runs`` lists the jobs. It is read only when it is
the caller's and nobody else may write it (``record._private``): a planted record
could point ``stop --job`` at someone else's state directory.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from ddsup._errors import UntrustedRunError
from ddsup.jobs._slurm import check_job_id
from ddsup.record import check_private, write_private
from ddsup.units import printable

FORMAT = 1
_HINT = "ddsup reads only records of yours (~/.local/state/ddsup/jobs, mode 0700)"


class SubmissionJson(TypedDict):
    """A job's record (:class:`Submission`), in the jobs directory and in ``--json``."""

    format: int
    job_id: str
    job_name: str
    state_dir: str
    unit_dir: str
    script: str
    submitted_at: float
    host: str
    profile: str | None
    sbatch_args: list[str]


@dataclass(frozen=True)
class Submission:
    """One job ``ddsup submit`` submitted."""

    job_id: str
    job_name: str
    state_dir: str
    unit_dir: str
    script: str  # the batch script as submitted (in the state directory)
    submitted_at: float
    host: str  # where it was submitted from
    profile: str | None = None
    sbatch_args: tuple[str, ...] = ()  # given after `--`: this submission's alone

    @property
    def batch_output(self) -> Path:
        """Where the job's batch script writes (``#SBATCH --output``), ddsup's own
        console lines included: in the state directory, one file per job."""
        return Path(self.state_dir) / f"slurm-{self.job_id}.out"

    def to_json(self) -> SubmissionJson:
        return {
            "format": FORMAT,
            "job_id": self.job_id,
            "job_name": self.job_name,
            "state_dir": self.state_dir,
            "unit_dir": self.unit_dir,
            "script": self.script,
            "submitted_at": self.submitted_at,
            "host": self.host,
            "profile": self.profile,
            "sbatch_args": list(self.sbatch_args),
        }

    @classmethod
    def from_json(cls, data: object) -> Submission:
        """Read back :meth:`to_json`; ValueError when it is not one."""
        if not isinstance(data, Mapping):
            raise ValueError("not a JSON object")
        text = ("job_id", "job_name", "state_dir", "unit_dir", "script", "host")
        if not all(isinstance(data.get(key), str) for key in text):
            raise ValueError(f"needs strings {', '.join(text)}")
        when, profile, extra = (
            data.get("submitted_at"),
            data.get("profile"),
            data.get("sbatch_args"),
        )
        return cls(
            **{key: str(data[key]) for key in text},
            submitted_at=float(when) if isinstance(when, int | float) else 0.0,
            profile=profile if isinstance(profile, str) else None,
            sbatch_args=tuple(str(a) for a in extra) if isinstance(extra, list) else (),
        )


def records_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``${XDG_STATE_HOME:-~/.local/state}/ddsup/jobs``."""
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local/state")
    return Path(base) / "ddsup" / "jobs"


def remember(submission: Submission, environ: Mapping[str, str] | None = None) -> Path:
    """Write ``submission``'s record (the directory made 0700 when new); its path."""
    directory = records_dir(environ)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    check_private(directory, directory=True, error=UntrustedRunError, hint=_HINT)
    path = directory / f"{check_job_id(submission.job_id)}.json"
    write_private(path, json.dumps(submission.to_json(), indent=2, sort_keys=True) + "\n")
    return path


def recall(job_id: str, environ: Mapping[str, str] | None = None) -> Submission | None:
    """The record of job ``job_id``; None when there is none (UntrustedRunError when
    there is one that is not the caller's alone)."""
    path = records_dir(environ) / f"{check_job_id(job_id)}.json"
    try:
        check_private(path.parent, directory=True, error=UntrustedRunError, hint=_HINT)
        check_private(path, directory=False, error=UntrustedRunError, hint=_HINT)
        return Submission.from_json(json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        raise UntrustedRunError(f"cannot read {printable(str(path))}: {err}") from None


def submissions(environ: Mapping[str, str] | None = None) -> list[Submission]:
    """Every readable record, newest first; one that is not the caller's is skipped."""
    directory = records_dir(environ)
    try:
        check_private(directory, directory=True, error=UntrustedRunError, hint=_HINT)
        names = os.listdir(directory)
    except (OSError, UntrustedRunError):
        return []
    found = []
    for name in names:
        stem = name[: -len(".json")]
        if not name.endswith(".json") or not stem.isdigit():
            continue
        try:
            record = recall(stem, environ)
        except (UntrustedRunError, ValueError):
            continue
        if record is not None:
            found.append(record)
    return sorted(found, key=lambda s: (s.submitted_at, int(s.job_id)), reverse=True)
