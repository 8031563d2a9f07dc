"""Long jobs on the real test cluster: losing a node, the walltime, requeue, het jobs, salloc.

Each test submits one job to the session's 3-node cluster and checks what a user of a
12-48 hour job relies on, from ddsup's files (``events.jsonl``, ``result.json``, the
worker's output) and from Slurm itself (``scontrol``, ``squeue``); afterwards no process
of the run may be left on any node.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from support.ports import free_port

from .cluster import SlurmCluster, wait_until
from .jobs import (
    DdsupJob,
    agent_pid,
    describe,
    finish,
    job_log,
    release_when_requeued,
    run_processes,
    tiny_lane_unit,
    worker_unit,
)

pytestmark = pytest.mark.slurm

REHEARSAL = Path(__file__).resolve().parents[2] / "units" / "examples" / "rehearsal"


@pytest.fixture
def job(tmp_path: Path) -> DdsupJob:
    return DdsupJob(tmp_path / "run")


def _results(job: DdsupJob) -> list[dict[str, Any]]:
    path = job.state / "results.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


# -- losing a node under load ---------------------------------------------------------------


def _surviving_job(job: DdsupJob, prompts: int) -> None:
    """Six fake-vllm lanes that may be lost, an endpoint that needs half of them, and the
    rehearsal worker allowed ONE attempt per prompt: any request the endpoint could not
    place is an error in its results."""
    lane = (REHEARSAL / "lane@.toml").read_text()
    lane = lane.replace(
        '"--model", "{model}"]', '"--model", "{model}", "--tokens-per-second", "25"]'
    ).replace('timeout_stop = "5s"', 'timeout_stop = "5s"\non_failure = "continue"')
    endpoint = (REHEARSAL / "endpoint.toml").read_text()
    endpoint = endpoint.replace("port = 9000", f"port = {free_port()}")
    endpoint = endpoint.replace('min_ready = "100%"', 'min_ready = "50%"')
    worker = (REHEARSAL / "worker.toml").read_text()
    worker = worker.replace(
        '"{unit_dir}/generate.py"',
        f'"{{unit_dir}}/generate.py", "--limit", "{prompts}", "--max-attempts", "1", '
        '"--concurrency", "12"',
    )
    job.write_units({"lane@.toml": lane, "endpoint.toml": endpoint, "worker.toml": worker})
    for name in ("generate.py", "prompts.jsonl"):
        shutil.copy(REHEARSAL / name, job.units / name)


def test_sigkill_of_one_agent_under_load_loses_no_request(
    slurm_cluster: SlurmCluster, job: DdsupJob
) -> None:
    prompts = 300
    _surviving_job(job, prompts)
    job_id = job.submit(slurm_cluster)
    wait_until(lambda: len(_results(job)) >= 40, 60, lambda: "the worker never got going")
    os.kill(agent_pid(job.invocation_id(), "n2"), signal.SIGKILL)
    killed_at = time.time()
    result = finish(slurm_cluster, job, job_id, timeout=120)

    assert (result.state, result.exit_code) == ("COMPLETED", 0), job_log(slurm_cluster, job, job_id)
    results = _results(job)
    failed = [r for r in results if r.get("error")]
    assert len(results) == prompts and not failed, failed
    n2 = [lane["instance"] for lane in job.lanes() if lane["node"] == "n2"]
    lost = {
        e["instance"]: e
        for e in job.events()
        if e.get("to") == "failed" and str(e.get("reason")).startswith("lost with its node")
    }
    assert sorted(lost) == sorted(n2), lost
    assert all(e["time"] >= killed_at - 1 for e in lost.values())
    others = [lane["instance"] for lane in job.lanes() if lane["node"] != "n2"]
    assert all(job.states(lane).count("ready") == 1 for lane in others)
    assert "failed" not in {s for lane in others for s in job.states(lane)}
    assert job.result()["status"] == "ok"


# -- the job's end: time left, stop_before_end ----------------------------------------------


def _slurm_time(text: str) -> float:
    return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))


def test_stop_before_end_stops_the_worker_ahead_of_the_time_limit(
    slurm_cluster: SlurmCluster, job: DdsupJob
) -> None:
    worker = worker_unit(
        "await-signal", "--marker", "signals", "--limit", "90", "--term-exit", "0",
    ).replace('type = "worker"\n', 'type = "worker"\nstop_before_end = "45s"\n')  # fmt: skip
    job.write_units({"lane@.toml": tiny_lane_unit(), "worker.toml": worker})
    job_id = job.submit(slurm_cluster, "--time=1")
    job.wait_event(lambda e: e.get("instance") == "worker" and e.get("to") == "ready", 30, "")
    ends = _slurm_time(slurm_cluster.job_info(job_id)["EndTime"])
    status = subprocess.run(
        [sys.executable, "-m", "ddsup", "status", "--json", "--state-dir", str(job.state)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    result = finish(slurm_cluster, job, job_id, timeout=90)

    assert (result.state, result.exit_code) == ("COMPLETED", 0), job_log(slurm_cluster, job, job_id)
    view = json.loads(status.stdout)
    assert view["ends_at"] == ends, (view["ends_at"], ends)
    assert 0 < view["time_left"] <= 60, view["time_left"]
    assert (job.state / "signals").read_text().split()[0] == "SIGTERM"
    [stopping] = [e for e in job.unit_events("worker") if e["to"] == "stopping"]
    assert stopping["reason"].startswith("stop_before_end = 45s: the job ends at"), stopping
    assert ends - 47 <= stopping["time"] <= ends - 43, (stopping["time"], ends)
    assert job.result()["status"] == "ok"


# -- requeue --------------------------------------------------------------------------------


def test_a_worker_asks_for_a_requeue_and_the_next_attempt_knows_it(
    slurm_cluster: SlurmCluster, job: DdsupJob
) -> None:
    record = job.root / "attempts.txt"
    worker = worker_unit("attempts", "--record", str(record), "--until", "1")
    job.write_units({"lane@.toml": tiny_lane_unit(), "worker.toml": worker})
    job_id = job.submit(slurm_cluster)
    release_when_requeued(slurm_cluster, job_id)
    result = slurm_cluster.wait_job(job_id, timeout=60)

    assert (result.state, result.exit_code) == ("COMPLETED", 0), job_log(slurm_cluster, job, job_id)
    assert result.fields["Restarts"] == "1"
    first = json.loads((job.state / "attempts" / "0" / "result.json").read_text())
    assert (first["status"], first["exit_code"]) == ("requeued", 85), first
    assert first["cause"]["reason"].endswith("the job was requeued"), first
    assert job.result()["status"] == "ok", job.result()
    assert record.read_text().splitlines() == [f"0 {job.state}", f"1 {job.state}"]
    first_run = json.loads((job.state / "attempts" / "0" / "run.json").read_text())
    for invocation in (first_run["invocation_id"], job.invocation_id()):
        assert not run_processes(invocation), describe(run_processes(invocation))


def test_a_requeue_the_job_does_not_allow_ends_it_as_the_workers_failure(
    slurm_cluster: SlurmCluster, job: DdsupJob
) -> None:
    worker = worker_unit("attempts", "--record", str(job.root / "attempts.txt"))
    job.write_units({"lane@.toml": tiny_lane_unit(), "worker.toml": worker})
    job_id = job.submit(slurm_cluster, "--no-requeue")
    result = finish(slurm_cluster, job, job_id)

    assert (result.state, result.exit_code) == ("FAILED", 85), job_log(slurm_cluster, job, job_id)
    outcome = job.result()
    assert outcome["status"] == "worker_failed", outcome
    assert "asked for a requeue (exit status 85), but the job does not allow it" in str(outcome)


# -- where the client runs: a heterogeneous job, outside the allocation ---------------------


def _through_the_endpoint(job: DdsupJob, prompts: int = 12) -> None:
    """fake-vllm lanes, the endpoint and the rehearsal worker asking ``prompts`` questions."""
    endpoint = (REHEARSAL / "endpoint.toml").read_text()
    worker = (REHEARSAL / "worker.toml").read_text()
    worker = worker.replace(
        '"{unit_dir}/generate.py"', f'"{{unit_dir}}/generate.py", "--limit", "{prompts}"'
    )
    job.write_units(
        {
            "lane@.toml": (REHEARSAL / "lane@.toml").read_text(),
            "endpoint.toml": endpoint.replace("port = 9000", f"port = {free_port()}"),
            "worker.toml": worker,
        }
    )
    for name in ("generate.py", "prompts.jsonl"):
        shutil.copy(REHEARSAL / name, job.units / name)


def _served(job: DdsupJob, prompts: int = 12) -> set[str]:
    """The nodes whose lanes answered the worker (every prompt answered, none failed)."""
    results = _results(job)
    assert len(results) == prompts and not [r for r in results if r.get("error")], results
    node_of_port = {lane["port"]: lane["node"] for lane in job.lanes()}
    return {node_of_port[int(r["text"][1:].split("]")[0])] for r in results}


def test_a_het_job_runs_the_client_on_component_0_and_the_lanes_on_component_1(
    slurm_cluster: SlurmCluster, job: DdsupJob
) -> None:
    _through_the_endpoint(job)
    script = job.script().replace(
        "#!/bin/bash\n", "#!/bin/bash\n#SBATCH -N1\n#SBATCH hetjob\n#SBATCH -N2\n", 1
    )
    job_id = slurm_cluster.sbatch(script)
    result = finish(slurm_cluster, job, job_id, timeout=90)

    assert (result.state, result.exit_code) == ("COMPLETED", 0), job_log(slurm_cluster, job, job_id)
    plan = job.plan()
    assert [(n["name"], n["gpus"]) for n in plan["nodes"]] == [
        ("n1", []),
        ("n2", [0, 1]),
        ("n3", [0, 1]),
    ]
    assert plan["client"] == "n1"
    assert {lane["node"] for lane in job.lanes()} == {"n2", "n3"}
    for client in ("endpoint", "worker"):
        assert {e["node"] for e in job.unit_events(client)} == {"n1"}
    assert _served(job) == {"n2", "n3"}
    agents = (job.state / "logs" / "agents.log").read_text()
    assert "error" not in agents.lower(), agents


def test_a_run_started_with_salloc_outside_the_allocation(
    slurm_cluster: SlurmCluster, job: DdsupJob
) -> None:
    _through_the_endpoint(job)
    argv = [sys.executable, "-m", "ddsup", "start", str(job.units), *job.start_args]
    argv += ["--state-dir", str(job.state), "-v"]
    done = slurm_cluster.run(["salloc", "-N3", "--time=5", *argv], check=False, timeout=120)

    assert done.returncode == 0, done.stdout + done.stderr
    here = socket.gethostname()
    plan = job.plan()
    assert plan["client"] == here
    assert [(n["name"], n["gpus"]) for n in plan["nodes"]][-1] == (here, [])
    assert {lane["node"] for lane in job.lanes()} == {"n1", "n2", "n3"}
    for client in ("endpoint", "worker"):
        assert {e["node"] for e in job.unit_events(client)} == {here}
    assert _served(job) == {"n1", "n2", "n3"}
    assert not run_processes(job.invocation_id()), describe(run_processes(job.invocation_id()))
