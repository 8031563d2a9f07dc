"""``ddsup stop --job ID``: end a job's run in order, the way a signal in the job does.

A job that waits is cancelled (nothing of it runs). A job that runs gets SIGTERM in its
batch step alone (``scancel --batch --signal=TERM``): the batch script ``exec``-ed
``ddsup start``, so ddsup gets it as it gets ``#SBATCH --signal=B:TERM@…``, stops the
worker, the endpoint and the lanes in order with their ``timeout_stop``, and the job
exits 143. Never ``scancel`` alone (every step at once) or ``-9``. Asked again while
ddsup stops, it sends SIGTERM again, which ddsup takes as "kill everything now".
"""

from __future__ import annotations

import time
from pathlib import Path

from ddsup._errors import RunStateError
from ddsup.jobs._slurm import Slurm
from ddsup.jobs._view import JobView, Phase, observe

STOP_WAIT = 900.0  # seconds for an ordered stop: every level's timeout_stop, then Slurm
_POLL = 0.5  # Slurm tells nobody when a job ends: squeue is asked this often
_RESULT_WAIT = 10.0  # for result.json to show on a shared file system after the job ended
_ENDED = frozenset({Phase.FINISHED, Phase.NO_RUN, Phase.CUT_OFF, Phase.UNKNOWN})


def stop_job(
    job_id: str,
    state_dir: Path | None = None,
    *,
    wait: bool = True,
    slurm: Slurm | None = None,
    timeout: float = STOP_WAIT,
) -> int:
    """Stop job ``job_id`` (see the module); print what happened; 0 unless it did not
    end within ``timeout`` (RunStateError)."""
    slurm = slurm or Slurm()
    view = observe(job_id, state_dir, slurm)
    if view.phase in _ENDED or view.phase is Phase.ENDING:
        print(f"ddsup: job {job_id} has already ended: {view.summary}")
        return 0
    if view.phase in (Phase.PENDING, Phase.REQUEUED):
        slurm.cancel(job_id)
        print(f"ddsup: job {job_id} was waiting ({view.summary}); cancelled, nothing of it ran")
        return 0
    slurm.cancel(job_id, signal="TERM", batch=True)
    who = "ddsup start" if view.phase is Phase.RUNNING else "its batch script (ddsup not started)"
    print(f"ddsup: stopping job {job_id}: SIGTERM to {who} …", flush=True)
    if not wait:
        return 0
    ended = _wait_end(job_id, state_dir, slurm, timeout)
    print(f"ddsup: job {job_id} stopped: {ended.summary}")
    return 0


def _wait_end(job_id: str, state_dir: Path | None, slurm: Slurm, timeout: float) -> JobView:
    """Poll (bounded) until the job has ended, then until its result is readable."""
    deadline = time.monotonic() + timeout
    while True:
        job = slurm.queue([job_id]).get(job_id)
        if job is None or job.terminal:
            break
        if time.monotonic() > deadline:
            raise RunStateError(
                f"job {job_id} is still {job.state} after {timeout:g}s: see ddsup status "
                f"--job {job_id}; ddsup stop --job {job_id} again kills everything at once"
            )
        time.sleep(_POLL)
    view = observe(job_id, state_dir, slurm)
    settle = time.monotonic() + _RESULT_WAIT
    while view.phase is Phase.CUT_OFF and time.monotonic() < settle:
        time.sleep(_POLL)  # an NFS client may show result.json a little late
        view = observe(job_id, state_dir, slurm)
    return view
