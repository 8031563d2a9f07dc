"""Slurm jobs from the login node: ``ddsup submit``, and a job's run found and followed.

The front door of the package; other packages import these names, never its modules:

- ``configure_submit``/``run_submit``: ``ddsup submit DIR`` (``_submit``) from the
  ``[job]`` settings (``units._job``: a profile, the directory's ``job.toml``, flags;
  ``_job_request``), the batch script it renders (``_script``), ``sbatch``;
- ``observe`` (``job_view``: from a given ``squeue`` answer) → :class:`JobView`: Slurm's view of a job (``_slurm``, ``_slurm_job``:
  ``squeue``, ``sacct`` where accounting is configured) reconciled with its run's
  record (``_view``), for ``status|logs|report --job``;
- ``stop_job``: ``ddsup stop --job`` (``_stop_job``);
- ``submissions``/:class:`Submission`: what ``ddsup submit`` recorded (``_submissions``),
  for ``ddsup runs``.

Its names are imported when first used (PEP 562, ``ddsup._lazy``): ``ddsup status``
without ``--job`` imports none of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ddsup._lazy import lazy_names

if TYPE_CHECKING:
    from ddsup.jobs._slurm import Slurm as Slurm
    from ddsup.jobs._slurm_job import SlurmJob as SlurmJob
    from ddsup.jobs._stop_job import stop_job as stop_job
    from ddsup.jobs._submissions import Submission as Submission
    from ddsup.jobs._submissions import submissions as submissions
    from ddsup.jobs._submit import configure_submit as configure_submit
    from ddsup.jobs._submit import run_submit as run_submit
    from ddsup.jobs._view import JobRun as JobRun
    from ddsup.jobs._view import JobView as JobView
    from ddsup.jobs._view import JobViewJson as JobViewJson
    from ddsup.jobs._view import Phase as Phase
    from ddsup.jobs._view import job_view as job_view
    from ddsup.jobs._view import observe as observe
    from ddsup.jobs._view import tail as tail

_LAZY = {
    "Submission": "ddsup.jobs._submissions",
    "submissions": "ddsup.jobs._submissions",
    "Slurm": "ddsup.jobs._slurm",
    "SlurmJob": "ddsup.jobs._slurm_job",
    "stop_job": "ddsup.jobs._stop_job",
    "configure_submit": "ddsup.jobs._submit",
    "run_submit": "ddsup.jobs._submit",
    "JobRun": "ddsup.jobs._view",
    "JobView": "ddsup.jobs._view",
    "JobViewJson": "ddsup.jobs._view",
    "Phase": "ddsup.jobs._view",
    "job_view": "ddsup.jobs._view",
    "observe": "ddsup.jobs._view",
    "tail": "ddsup.jobs._view",
}

__getattr__ = lazy_names(__name__, _LAZY, globals())
