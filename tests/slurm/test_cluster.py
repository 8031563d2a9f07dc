"""The test cluster behaves like the Slurm that ddsup will meet on a real allocation.

These pin the behaviours ddsup depends on (one task per node, batch exit codes,
cancellation reaching step processes within KillWait, ``--overlap`` steps inside a
running job, ``--kill-on-bad-exit``) and the harness's own promise: a stopped cluster
leaves no process behind, and a cluster that cannot start says why.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support import procs

from . import cluster as cluster_module
from .cluster import KILL_WAIT_S, MARKER, SlurmCluster, SlurmClusterError, wait_until

pytestmark = pytest.mark.slurm


def _marked_pids(value: str) -> list[int]:
    """Live processes whose environment carries ``MARKER=value``."""
    return sorted(procs.carrying(MARKER, value))


def _read_pids(directory: Path, count: int, timeout: float = 15.0) -> list[int]:
    """Wait until ``count`` task PID files exist in ``directory``; their PIDs."""

    def ready() -> bool:
        files = list(directory.glob("pid.*")) if directory.exists() else []
        return len(files) >= count and all(f.read_text().strip() for f in files)

    wait_until(ready, timeout, lambda: f"{count} pid files never appeared in {directory}")
    return [int(f.read_text()) for f in sorted(directory.glob("pid.*"))]


def test_all_nodes_registered_with_declared_resources(slurm_cluster: SlurmCluster) -> None:
    assert slurm_cluster.nodes() == ["n1", "n2", "n3"]
    out = slurm_cluster.run(["sinfo", "-h", "-N", "-o", "%N %c %m %f"]).stdout
    rows = sorted(line.split() for line in out.splitlines())
    assert rows == [[node, "2", "1000", "fake"] for node in ("n1", "n2", "n3")]


def test_srun_runs_one_task_per_node(slurm_cluster: SlurmCluster) -> None:
    argv = ["srun", "-N3", "--ntasks-per-node=1", "printenv", "SLURMD_NODENAME"]
    out = slurm_cluster.run(argv).stdout
    assert sorted(out.split()) == ["n1", "n2", "n3"]


@pytest.mark.parametrize(("code", "state"), [(0, "COMPLETED"), (3, "FAILED")])
def test_sbatch_exit_code_is_visible(slurm_cluster: SlurmCluster, code: int, state: str) -> None:
    job = slurm_cluster.sbatch(f"#!/bin/bash\necho hello from $SLURMD_NODENAME\nexit {code}\n")

    result = slurm_cluster.wait_job(job, timeout=30)

    assert (result.state, result.exit_code, result.signal) == (state, code, 0)
    assert slurm_cluster.job_output(job).strip() == "hello from n1"


def test_scancel_ends_step_processes_within_kill_wait(slurm_cluster: SlurmCluster) -> None:
    # The tasks ignore SIGTERM, so only Slurm's SIGKILL after KillWait can end them.
    script = """#!/bin/bash
d=cancel-$SLURM_JOB_ID; mkdir -p $d
srun --ntasks-per-node=1 bash -c "trap '' TERM; echo \\$\\$ > $d/pid.\\$SLURMD_NODENAME; exec sleep 300"
"""
    job = slurm_cluster.sbatch(script, extra_args=["-N3", "--ntasks-per-node=1"])
    pids = _read_pids(slurm_cluster.layout.jobs / f"cancel-{job}", 3)
    assert all(procs.alive(pid) for pid in pids)

    cancelled = time.monotonic()
    slurm_cluster.run(["scancel", job])
    wait_until(
        lambda: not any(procs.alive(pid) for pid in pids),
        KILL_WAIT_S + 5,
        lambda: f"step tasks {[p for p in pids if procs.alive(p)]} outlived scancel",
    )

    assert time.monotonic() - cancelled <= KILL_WAIT_S + 5
    assert slurm_cluster.wait_job(job, timeout=15).state == "CANCELLED"


def test_overlap_step_starts_inside_running_job(slurm_cluster: SlurmCluster) -> None:
    # Step 0 holds every CPU of the job; a plain step must wait, an --overlap step runs.
    script = """#!/bin/bash
d=overlap-$SLURM_JOB_ID; mkdir -p $d
srun --ntasks-per-node=1 bash -c "touch $d/held.\\$SLURMD_NODENAME; exec sleep 300" &
holder=$!
for i in $(seq 300); do [ "$(ls $d | wc -l)" -ge 3 ] && break; sleep 0.05; done
timeout 2 srun --nodes=1 --ntasks=1 --nodelist=n2 true 2>/dev/null; echo "plain=$?"
srun --overlap --kill-on-bad-exit=1 --nodes=2 --ntasks=2 --ntasks-per-node=1 \\
    --nodelist=n2,n3 printenv SLURMD_NODENAME | sort | tr '\\n' ' '; echo "overlap=${PIPESTATUS[0]}"
kill $holder; wait $holder
exit 0
"""
    job = slurm_cluster.sbatch(script, extra_args=["-N3", "--ntasks-per-node=1"])

    result = slurm_cluster.wait_job(job, timeout=30)

    lines = [line for line in slurm_cluster.job_output(job).splitlines() if "=" in line]
    assert lines[:2] == ["plain=124", "n2 n3 overlap=0"]
    assert result.state == "COMPLETED"


def test_kill_on_bad_exit_ends_the_other_tasks(slurm_cluster: SlurmCluster) -> None:
    # Node 1 fails only once every task is running (its pid file written): a task that ends
    # before the others were launched races Slurm's launch of them, which is not what -K
    # is about. The wait is bounded (10 s); the files are the event, polled by the shell.
    script = (
        'echo $$ > "$0.$SLURM_NODEID"; [ "$SLURM_NODEID" = 1 ] || exec sleep 300; '
        'for _ in $(seq 100); do set -- "$0" "$0".*; [ $# -gt 3 ] && break; sleep 0.1; done; '
        "exit 3"
    )
    base = slurm_cluster.layout.jobs / f"kobe-{os.getpid()}-{time.monotonic_ns()}"
    argv = ["srun", "-K", "-N3", "--ntasks-per-node=1", "bash", "-c", script, str(base)]

    started = time.monotonic()
    proc = slurm_cluster.run(argv, check=False)

    assert proc.returncode == 143, proc.stderr  # srun's own status: the step was terminated
    assert "task 1: Exited with exit code 3" in proc.stderr
    assert time.monotonic() - started <= KILL_WAIT_S + 5
    pids = [int(p.read_text()) for p in base.parent.glob(f"{base.name}.*")]
    assert len(pids) == 3
    assert not any(procs.alive(pid) for pid in pids)


@pytest.mark.usefixtures("slurm_installed")
def test_stop_leaves_no_process_even_when_a_task_escaped(tmp_path: Path) -> None:
    # A second cluster beside the session's: its own ports, its own munged.
    second = SlurmCluster.start(tmp_path / "c", nodes=1)
    try:
        escaped = second.layout.jobs / "escaped.pid"
        step = subprocess.Popen(
            ["srun", "-N1", "bash", "-c", f"setsid sleep 300 & echo $! > {escaped}; wait"],
            env=second.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_until(
            lambda: escaped.exists() and escaped.read_text().strip() != "", 15, lambda: "no task"
        )
        escaped_pid = int(escaped.read_text())
        daemons = list(second.pids.values())
    finally:
        second.stop()
    step.wait(timeout=10)

    assert not procs.alive(escaped_pid)
    assert not any(procs.alive(pid) for pid in daemons)
    assert _marked_pids(second.env[MARKER]) == []


@pytest.mark.usefixtures("slurm_installed")
def test_failed_start_names_the_daemon_and_shows_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_render = cluster_module.render_conf

    def broken_conf(*args: object, **kwargs: object) -> str:
        return real_render(*args, **kwargs) + "LaunchParameters=\n"  # type: ignore[arg-type]

    monkeypatch.setattr(cluster_module, "render_conf", broken_conf)

    with pytest.raises(SlurmClusterError, match="exited during startup") as failure:
        SlurmCluster.start(tmp_path / "broken", nodes=1, timeout=20)

    # Both daemons read the broken file and both die; which one is seen dead first is the
    # scheduler's: the error names whichever did, with its log.
    named = str(failure.value).split(" exited during startup")[0].split(", ")
    assert named and set(named) <= {"slurmctld", "slurmd-n1"}, failure.value
    assert "LaunchParameters" in str(failure.value)
    assert _marked_pids(str((tmp_path / "broken").resolve())) == []


@pytest.mark.usefixtures("slurm_installed")
def test_cluster_dies_with_its_owner(tmp_path: Path) -> None:
    # The by-hand runner owns a cluster; SIGKILL it and the keeper must end the rest.
    root = (tmp_path / "owned").resolve()
    argv = [sys.executable, cluster_module.__file__, str(root), "--nodes", "1"]
    owner = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert owner.stdout is not None
        first_line = owner.stdout.readline()  # printed once every node is idle
        daemons = _marked_pids(str(root))
    finally:
        owner.kill()
        owner.communicate(timeout=10)

    assert first_line.startswith("cluster up"), first_line
    assert len(daemons) >= 3  # munged, slurmctld, slurmd
    wait_until(
        lambda: not _marked_pids(str(root)),
        10,
        lambda: f"processes outlived their owner: {_marked_pids(str(root))}",
    )
