"""GPUs as Slurm gives them per node, and two-node replicas, in real ``sbatch -N3`` jobs.

The session's cluster has four fake GRES GPUs per node (``cluster.fake_gpus``), so Slurm
itself sets each node's ``CUDA_VISIBLE_DEVICES`` for a step, as on a GPU cluster: a job
that shares node n2 with another job's two GPUs gets n2's other two. ddsup runs without
``--gpus-per-node``: every agent reports what its node was given, and the lanes there get
exactly those GPUs. The replica tests run a lane over n1 and n2 and end one rank on cue:
the whole replica restarts, counted once.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from .cluster import SlurmCluster
from .jobs import DdsupJob, finish, job_log, program, tiny_lane_unit, worker_unit

pytestmark = pytest.mark.slurm

HELD = "the replica restarts as one"


def _slurm_gpus(cluster: SlurmCluster, job_id: str) -> dict[str, list[str]]:
    """Each node's GPU indices as ``scontrol show job -d`` says the job got them."""
    text = cluster.run(["scontrol", "show", "job", "-d", job_id]).stdout
    found = {}
    for node, low, high in re.findall(r"Nodes=(\S+) .*?GRES=gpu:\d+\(IDX:(\d+)(?:-(\d+))?\)", text):
        found[node] = [str(i) for i in range(int(low), int(high or low) + 1)]
    return found


def test_lanes_get_the_gpus_slurm_gave_each_node(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    if slurm_cluster.gpus_per_node < 4:
        pytest.fail("the test cluster has no fake GPUs (device files need root)")
    blocker = slurm_cluster.sbatch(
        "#!/bin/bash\nexec sleep 300\n", extra_args=["-N1", "-w", "n2", "--gres=gpu:2"]
    )
    try:
        slurm_cluster.wait_job_state(blocker, {"RUNNING"})
        job = DdsupJob(tmp_path / "run", start_args=())  # no --gpus-per-node: detected
        lane = tiny_lane_unit("--record", "gpus-{instance}.json")
        job.write_units({"lane@.toml": lane})  # no worker: the test ends the job
        job_id = job.submit(slurm_cluster, "--gres=gpu:2")
        job.wait_ready([f"lane@{i}" for i in range(6)])
        given = _slurm_gpus(slurm_cluster, job_id)  # shown while the job runs
        slurm_cluster.run(["scancel", job_id])
        result = finish(slurm_cluster, job, job_id)
    finally:
        slurm_cluster.run(["scancel", blocker], check=False)

    assert result.state == "CANCELLED", job_log(slurm_cluster, job, job_id)
    assert given == {"n1": ["0", "1"], "n2": ["2", "3"], "n3": ["0", "1"]}, given
    assert {n["name"]: n["devices"] for n in job.plan()["nodes"]} == given
    seen = {}
    for lane_item in job.lanes():
        record = json.loads((job.state / f"gpus-{lane_item['instance']}.json").read_text())
        assert record["node"] == lane_item["node"]
        seen.setdefault(lane_item["node"], []).append(record["cuda"])
    assert {node: sorted(cuda) for node, cuda in seen.items()} == given


@pytest.mark.parametrize(
    ("who", "code"),
    [("lane@0:1", 1), ("lane@0", 1), ("lane@0:1", 0)],
    ids=["follower-crash", "rank-0-crash", "follower-exit-0"],
)
def test_a_two_node_replica_restarts_whole(
    slurm_cluster: SlurmCluster, tmp_path: Path, who: str, code: int
) -> None:
    """One rank ends 2 s after its first start (on n1 or n2); the other is taken down,
    both start again, and the worker ends the job once rank 0 is ready again."""
    ends = ("--exit-code", str(code), "--after", "2", "--me", "{instance}", "--only", who,
            "--once", "ended")  # fmt: skip
    lane = tiny_lane_unit(*ends, restart="on-failure", lane="nodes = 2\nreplicas = 1").replace(
        "restart_sec", f"exec_follower = {program('lane', *ends)}\nrestart_sec"
    )
    job = DdsupJob(tmp_path / "run")
    worker = worker_unit("await-restart", "--instance", "lane@0")
    job.write_units({"lane@.toml": lane, "worker.toml": worker})

    job_id = job.submit(slurm_cluster)
    result = finish(slurm_cluster, job, job_id)

    assert (result.state, result.exit_code) == ("COMPLETED", 0), job_log(slurm_cluster, job, job_id)
    peer = "lane@0" if who == "lane@0:1" else "lane@0:1"
    assert (job.node_of("lane@0"), job.node_of("lane@0:1")) == ("n1", "n2")
    went = next(e for e in job.unit_events(who) if e["to"] == "restarting")
    assert went["reason"] == f"exit status {code}; {HELD}"
    taken = next(e for e in job.unit_events(peer) if e["to"] == "restarting")
    assert taken["reason"] == f"{who} went down (exit status {code}); {HELD}"
    for instance in ("lane@0", "lane@0:1"):
        states = job.states(instance)
        assert states.count("restarting") == 1, states
        assert states[states.index("restarting") :][:3] == ["restarting", "starting", "ready"]
        assert {e["node"] for e in job.unit_events(instance)} == {job.node_of(instance)}
