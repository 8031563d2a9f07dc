"""The Slurm epilog ends the runs of the job that ended, never a run a process names.

Any user can read a run's invocation id (``ps``, ``/proc/*/cgroup``) and start a
process that carries it, with any ``SLURM_JOB_ID``. Here root's run belongs to job 999;
the second user starts ``env SLURM_JOB_ID=424242 DDSUP_INVOCATION_ID=<that run's id>
setsid sleep``, also with ``DDSUP_STATE_DIR`` naming the run's directory or a forged
one of its own that says the run is job 424242's. ``packaging/slurm-epilog.sh``, run as
slurmd runs it (root, ``SLURM_JOB_ID`` and ``SLURM_JOB_UID`` set), for job 424242 of
that user, and for a job 424242 of root's, leaves root's run alone, which then ends as
it would have; for job 999 it ends the run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hostile_helpers import WORKER_STATUS
from second_user import SecondUser, as_root_only

from ddsup.process._proc import is_dead
from support.polls import until_sync
from support.runs import PY, end, read_events, start_argv, start_env
from support.unit_dirs import UnitDir

pytestmark = as_root_only

EPILOG = Path(__file__).resolve().parents[2] / "packaging" / "slurm-epilog.sh"
VICTIM_JOB, ATTACKER_JOB = "999", "424242"
RELEASE_PY = """\
import os, sys, time
deadline = time.monotonic() + 120
while not os.path.exists(sys.argv[1]):
    if time.monotonic() > deadline:
        sys.exit(99)
    time.sleep(0.05)
sys.exit(7)
"""


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory both root and the second user can reach (tmp_path's parents are 0700)."""
    base = Path(tempfile.mkdtemp(prefix="ddsup-epilog-", dir="/tmp"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def epilog(job: str, uid: int, shims: Path) -> list[str]:
    """The epilog as slurmd runs it; the lines it logged (``logger`` shimmed to stdout)."""
    env = {
        "PATH": f"{shims}:{os.environ['PATH']}",
        "SLURM_JOB_ID": job,
        "SLURM_JOB_UID": str(uid),
        "DDSUP": str(Path(sys.executable).parent / "ddsup"),
    }
    done = subprocess.run(
        ["bash", str(EPILOG)], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    said = done.stdout.splitlines()
    assert not any("cleanup failed" in line for line in said), done.stdout
    return said


def _shims(path: Path) -> Path:
    """``logger`` that prints what it would send to syslog."""
    path.mkdir()
    (path / "logger").write_text('#!/bin/sh\nshift 2\n[ "$1" = "--" ] && shift\necho "$@"\n')
    (path / "logger").chmod(0o755)
    return path


def _victim(shared: Path) -> tuple[subprocess.Popen[bytes], Path]:
    """Root's run of job 999: one worker that exits 7 once ``shared/release`` exists."""
    units = UnitDir(shared / "units")
    (shared / "units" / "release.py").write_text(RELEASE_PY)
    units.add(
        "worker", "worker", [PY, str(shared / "units" / "release.py"), str(shared / "release")]
    )
    state = shared / "state"
    env = start_env({"SLURM_JOB_ID": VICTIM_JOB})
    with (shared / "output").open("wb") as out:
        argv = start_argv(units, state, "--launcher", "local")
        return subprocess.Popen(argv, env=env, stdout=out, stderr=out), state


def _worker_pid(state: Path) -> int:
    events = read_events(state, live=True)
    ready = any(e.get("to") == "ready" for e in events)
    pids = [e["pid"] for e in events if e.get("event") == "process"]
    return pids[-1] if ready and pids else 0


def test_the_epilog_of_another_job_leaves_a_run_alone_whatever_its_processes_say(
    shared: Path, second_user: SecondUser
) -> None:
    process, state = _victim(shared)
    attackers: list[subprocess.Popen[bytes]] = []
    try:
        worker = until_sync(lambda: _worker_pid(state), "the worker to be ready", limit=30)
        victim_id = json.loads((state / "run.json").read_text())["invocation_id"]
        forged = second_user.owns(shared / "forged")
        forged.chmod(0o700)
        (forged / "run.json").write_text(
            json.dumps({"invocation_id": victim_id, "job": ATTACKER_JOB})
        )
        os.chown(forged / "run.json", second_user.uid, second_user.gid)
        for state_dir in (None, state, forged):
            extra = {} if state_dir is None else {"DDSUP_STATE_DIR": str(state_dir)}
            attackers.append(
                second_user.popen(
                    ["setsid", "sleep", "60"],
                    SLURM_JOB_ID=ATTACKER_JOB,
                    DDSUP_INVOCATION_ID=victim_id,
                    **extra,
                )
            )
        shims = _shims(shared / "shims")
        said = epilog(ATTACKER_JOB, second_user.uid, shims)  # the attacker's own job
        said += epilog(ATTACKER_JOB, 0, shims)  # a job of root's with the same id
        assert not is_dead(worker), f"the epilog of job {ATTACKER_JOB} ended the run: {said}"
        assert process.poll() is None, said
        assert not any(line.startswith("ended") and f"{state})" in line for line in said), said
        (shared / "release").touch()
        assert process.wait(timeout=60) == WORKER_STATUS
    finally:
        end(process)
        for attacker in attackers:
            attacker.kill()
            attacker.wait()
    result = json.loads((state / "result.json").read_text())
    assert (result["status"], result["exit_code"]) == ("worker_failed", WORKER_STATUS)


def test_the_epilog_of_the_run_s_job_ends_it(shared: Path) -> None:
    process, state = _victim(shared)
    try:
        worker = until_sync(lambda: _worker_pid(state), "the worker to be ready", limit=30)
        victim_id = json.loads((state / "run.json").read_text())["invocation_id"]
        said = epilog(VICTIM_JOB, 0, _shims(shared / "shims"))
        assert any(f"of run {victim_id} (job {VICTIM_JOB}" in line for line in said), said
        until_sync(lambda: is_dead(worker), "the worker to be ended")
        process.wait(timeout=60)
    finally:
        end(process)
