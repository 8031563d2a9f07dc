"""The packaged epilog, run by a real slurmd after each job: it ends what a run of that job
left behind, and nothing that another job's processes merely name.

The test cluster tracks processes with ``proctrack/linuxproc``, which loses a process
that left the job's process tree (``setsid … &`` in the batch script): that is what
the epilog is for. Job A leaves such a process of a run recorded as job A's (its state
directory's ``run.json`` says so): once A has ended, the epilog has ended it. Job B
leaves one that carries the invocation id of a process outside any job, as an
attacker's would: once B has ended, that process lives on.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from ddsup.process._proc import is_dead
from support.polls import until_sync
from support.runs import PY, start_env

from .cluster import SlurmCluster

pytestmark = [pytest.mark.slurm, pytest.mark.usefixtures("slurm_installed")]

EPILOG = Path(__file__).resolve().parents[2] / "packaging" / "slurm-epilog.sh"


def _epilog(tmp_path: Path) -> tuple[Path, Path]:
    """A wrapper for slurm.conf's ``Epilog`` (this ddsup, ``logger`` into a file) and that
    file, which also gets ``done JOB`` once the epilog of JOB has run."""
    log, shims = tmp_path / "epilog.log", tmp_path / "shims"
    shims.mkdir()
    (shims / "logger").write_text(
        f'#!/bin/sh\nshift 2\n[ "$1" = "--" ] && shift\necho "$@" >> {log}\n'
    )
    wrapper = tmp_path / "epilog.sh"
    wrapper.write_text(
        "#!/bin/bash\n"
        f"export PATH={shims}:$PATH DDSUP={Path(sys.executable).parent / 'ddsup'}\n"
        f"bash {EPILOG}\n"
        f'echo "done $SLURM_JOB_ID" >> {log}\n'
    )
    for program in (shims / "logger", wrapper):
        program.chmod(0o755)
    return wrapper, log


def _leave_behind(pid_file: Path, env: str, first: str = "") -> str:
    """A batch script that runs ``first``, then starts ``sleep`` out of the job's process
    tree with ``env``."""
    return (
        f"#!/bin/bash\n{first}\n"
        f"{env} setsid sleep 300 </dev/null >/dev/null 2>&1 &\necho $! > {pid_file}\n"
    )


def _pid(path: Path) -> int:
    until_sync(lambda: path.exists() and path.read_text().strip(), f"{path.name} to be written")
    return int(path.read_text())


def _logged(log: Path, line: str) -> str:
    until_sync(lambda: log.exists() and line in log.read_text(), f"the epilog to log {line!r}")
    return log.read_text()


def test_the_epilog_ends_its_job_s_runs_and_nothing_another_job_names(tmp_path: Path) -> None:
    wrapper, log = _epilog(tmp_path)
    cluster = SlurmCluster.start(tmp_path / "c", nodes=1, epilog=wrapper)
    outside_id, run_id = f"test-{uuid.uuid4()}", f"test-{uuid.uuid4()}"
    outside = subprocess.Popen(
        [PY, "-c", "import time; time.sleep(300)"],
        env=start_env({"DDSUP_INVOCATION_ID": outside_id}),
    )
    left: list[int] = []
    try:
        state = tmp_path / "state-a"
        state.mkdir(mode=0o700)
        fields = '{"invocation_id": "%s", "job": "%s"}'
        record = f"printf '{fields}' {run_id} \"$SLURM_JOB_ID\""
        script = _leave_behind(
            tmp_path / "a.pid",
            f"DDSUP_INVOCATION_ID={run_id} DDSUP_STATE_DIR={state}",
            first=f"{record} > {state}/run.json",  # what ddsup start records: this job's run
        )
        job_a = cluster.sbatch(script)
        left.append(_pid(tmp_path / "a.pid"))
        assert cluster.wait_job(job_a, timeout=60).state == "COMPLETED"
        said = _logged(log, f"done {job_a}")
        assert f"ended 1 process(es) of run {run_id}" in said, said
        until_sync(lambda: is_dead(left[0]), "the epilog to end what job A left")

        job_b = cluster.sbatch(
            _leave_behind(tmp_path / "b.pid", f"DDSUP_INVOCATION_ID={outside_id}")
        )
        left.append(_pid(tmp_path / "b.pid"))
        assert cluster.wait_job(job_b, timeout=60).state == "COMPLETED"
        said = _logged(log, f"done {job_b}")
        assert outside.poll() is None, f"the epilog of job {job_b} ended another run: {said}"
        assert not is_dead(left[1])  # what B left names no run of B's: not the epilog's
    finally:
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        outside.kill()
        outside.wait()
        cluster.stop()
