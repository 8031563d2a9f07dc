"""Operator commands on a run: ``status``, ``stop``, ``logs``, ``cleanup``, and metrics.

They find the run through its state directory (``_run_handle``) and never import the
controller: a live run is asked over its control channel (``status`` with one blocking
request, ``_run_handle.ask``; ``stop`` and ``restart`` over trio, ``_run_channel``), a
finished one is read from its files (``_status_view`` makes both the same typed rows).
``cleanup`` reads a run's records through one descriptor of its state directory
(``_recorded_run``); its ``--job`` form, the Slurm epilog's, acts as the job's user on
the runs recorded as that job's (``_job_cleanup``).
"""

from __future__ import annotations
