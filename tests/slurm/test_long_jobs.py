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
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from .cluster import SlurmCluster, wait_until
from .jobs import DdsupJob, agent_pid, finish, job_log, program, tiny_lane_unit, worker_unit

pytestmark = pytest.mark.slurm

REHEARSAL = Path(__file__).resolve().parents[2] / "units" / "examples" / "rehearsal"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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
    endpoint = endpoint.replace("port = 9000", f"port = {_free_port()}")
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
