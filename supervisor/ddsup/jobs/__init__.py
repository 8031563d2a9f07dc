"""Slurm jobs from the login node: ``ddsup submit`` renders and submits the batch script.

The front door of the package; other packages import these names, never its modules:

- ``configure_submit``/``run_submit``: ``ddsup submit DIR`` (``_submit``) from the
  ``[job]`` settings (``units._job``: a profile, the directory's ``job.toml``, flags;
  ``_request``), the batch script it renders (``_script``), ``sbatch``;
- :class:`Slurm`/:class:`SlurmJob`: the Slurm commands and what they print (``_slurm``,
  ``_slurm_job``);
- ``submissions``/:class:`Submission`: what ``ddsup submit`` recorded (``_records``).

Its names are imported when first used (PEP 562, ``ddsup._lazy``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ddsup._lazy import lazy_names

if TYPE_CHECKING:
    from ddsup.jobs._records import Submission as Submission
    from ddsup.jobs._records import submissions as submissions
    from ddsup.jobs._slurm import Slurm as Slurm
    from ddsup.jobs._slurm_job import SlurmJob as SlurmJob
    from ddsup.jobs._submit import configure_submit as configure_submit
    from ddsup.jobs._submit import run_submit as run_submit

_LAZY = {
    "Submission": "ddsup.jobs._records",
    "submissions": "ddsup.jobs._records",
    "Slurm": "ddsup.jobs._slurm",
    "SlurmJob": "ddsup.jobs._slurm_job",
    "configure_submit": "ddsup.jobs._submit",
    "run_submit": "ddsup.jobs._submit",
}

__getattr__ = lazy_names(__name__, _LAZY, globals())
