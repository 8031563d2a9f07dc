"""ddsup inside real Slurm batch jobs: ``sbatch -N3`` whose script is ``exec ddsup start``.

Each test submits one job to the session's 3-node cluster (three ``slurmd`` on this
host, so every node shares one address, as docs/slurm.md says ddsup handles), waits for
it to end, and checks what a user sees: the job's exit code, ``plan.json``,
``events.jsonl``, ``result.json``, and that no process carrying the run's
``DDSUP_INVOCATION_ID`` is alive on any node afterwards (docs/no-orphans.md). Lanes are either
``ddsup fake-vllm`` or the tiny HTTP lanes of ``job_programs.py`` (they start in ~0.1 s,
which keeps the file fast).
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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

from ddsup.plan import make_plan
from ddsup.plan._plan import Node
from ddsup.process._proc import start_time
from ddsup.units import load_unit_set
from support.ports import free_port

from .cluster import KILL_WAIT_S, SlurmCluster, wait_until
from .jobs import (
    GPUS_PER_NODE,
    DdsupJob,
    agent_pid,
    describe,
    finish,
    job_log,
    program,
    tiny_lane_unit,
    wait_no_processes,
    worker_unit,
)

pytestmark = pytest.mark.slurm

REHEARSAL = Path(__file__).resolve().parents[2] / "units" / "examples" / "rehearsal"
NODES = ("n1", "n2", "n3")
ALL_LANES = [f"lane@{i}" for i in range(len(NODES) * GPUS_PER_NODE)]
CLEAN_WITHIN_S = KILL_WAIT_S + 5


@pytest.fixture
def job(tmp_path: Path) -> DdsupJob:
    return DdsupJob(tmp_path / "run")


def _by_node(job: DdsupJob) -> dict[str, list[str]]:
    placed: dict[str, list[str]] = {}
    for lane in job.lanes():
        placed.setdefault(lane["node"], []).append(lane["instance"])
    return placed


def _assert_lane_events_on_planned_nodes(job: DdsupJob) -> None:
    for lane in job.lanes():
        events = job.unit_events(lane["instance"])
        assert "ready" in [e["to"] for e in events], (lane, events)
        assert {e["node"] for e in events} == {lane["node"]}, (lane, events)


# -- 1. the whole job ----------------------------------------------------------------------


def test_three_node_job_runs_lanes_on_every_node(
    slurm_cluster: SlurmCluster, job: DdsupJob
) -> None:
    job.write_units(
        {
            "lane@.toml": (REHEARSAL / "lane@.toml").read_text(),
            "worker.toml": worker_unit("query-lanes", "--model", "fake-llama"),
        }
    )

    job_id = job.submit(slurm_cluster)
    result = finish(slurm_cluster, job, job_id)

    assert (result.state, result.exit_code) == ("COMPLETED", 0), job_log(slurm_cluster, job, job_id)
    assert _by_node(job) == {"n1": ALL_LANES[0:2], "n2": ALL_LANES[2:4], "n3": ALL_LANES[4:6]}
    assert job.plan()["shared_address"] is True
    ports = [lane["port"] for lane in job.lanes()]
    assert len(set(ports)) == len(ports), f"ports must differ on a shared address: {ports}"
    _assert_lane_events_on_planned_nodes(job)
    answers = (job.state / "answers.json").read_text()
    assert all(f'"{lane}"' in answers for lane in ALL_LANES), answers
    assert job.result()["status"] == "ok"


def test_three_node_job_through_the_endpoint(slurm_cluster: SlurmCluster, job: DdsupJob) -> None:
    endpoint = (REHEARSAL / "endpoint.toml").read_text()
    worker = (
        (REHEARSAL / "worker.toml")
        .read_text()
        .replace('"{unit_dir}/generate.py"', '"{unit_dir}/generate.py", "--limit", "12"')
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

    job_id = job.submit(slurm_cluster)
    result = finish(slurm_cluster, job, job_id)

    assert (result.state, result.exit_code) == ("COMPLETED", 0), job_log(slurm_cluster, job, job_id)
    results = [json.loads(line) for line in (job.state / "results.jsonl").read_text().splitlines()]
    assert len(results) == 12 and not [r for r in results if r.get("error")], results
    node_of_port = {lane["port"]: lane["node"] for lane in job.lanes()}
    served_by = {node_of_port[int(r["text"][1:].split("]")[0])] for r in results}
    assert served_by == set(NODES), f"the endpoint used lanes on {sorted(served_by)} only"


# -- 2. and 3. remote failures --------------------------------------------------------------


def test_remote_lane_crash_is_restarted(slurm_cluster: SlurmCluster, job: DdsupJob) -> None:
    crashing = "lane@2"  # the first lane on n2
    lane = tiny_lane_unit(
        "--exit-code", "1", "--after", "1", "--me", "{instance}", "--only", crashing,
        "--once", "crashed",
        restart="on-failure",
    )  # fmt: skip
    job.write_units(
        {"lane@.toml": lane, "worker.toml": worker_unit("await-restart", "--instance", crashing)}
    )

    job_id = job.submit(slurm_cluster)
    result = finish(slurm_cluster, job, job_id)

    assert (result.state, result.exit_code) == ("COMPLETED", 0), job_log(slurm_cluster, job, job_id)
    assert job.node_of(crashing) == "n2"
    states = job.states(crashing)
    first_ready = states.index("ready")
    restart = states.index("restarting", first_ready)
    assert "ready" in states[restart:], states
    assert {e["node"] for e in job.unit_events(crashing)} == {"n2"}
    assert all(job.states(other).count("ready") == 1 for other in ALL_LANES if other != crashing)


def test_permanent_remote_failure_ends_the_job_with_70(
    slurm_cluster: SlurmCluster, job: DdsupJob
) -> None:
    failing = "lane@4"  # the first lane on n3
    lane = tiny_lane_unit(
        "--exit-code", "1", "--me", "{instance}", "--only", failing,
        restart="on-failure", service="start_limit_burst = 2",
    )  # fmt: skip
    job.write_units({"lane@.toml": lane})  # no worker: only a failure can end this run

    job_id = job.submit(slurm_cluster)
    result = finish(slurm_cluster, job, job_id)

    assert (result.state, result.exit_code) == ("FAILED", 70), job_log(slurm_cluster, job, job_id)
    outcome = job.result()
    assert (outcome["status"], outcome["cause"]["unit"]) == ("unit_failed", failing), outcome
    assert job.node_of(failing) == "n3"
    assert job.states(failing).count("starting") == 2, job.states(failing)
    took = job.run_event_time("finished") - job.run_event_time("starting")
    assert took < 15, f"the run took {took:.1f}s to fail"


# -- 4. and 5. killed from outside ----------------------------------------------------------


def _long_running(job: DdsupJob) -> None:
    job.write_units(
        {
            "lane@.toml": tiny_lane_unit(),
            "worker.toml": worker_unit("await-signal", "--marker", "signals", "--limit", "60"),
        }
    )


def test_sigkill_of_one_agent_fails_the_job_and_leaves_nothing(
    slurm_cluster: SlurmCluster, job: DdsupJob
) -> None:
    _long_running(job)
    job_id = job.submit(slurm_cluster)
    job.wait_ready(ALL_LANES)
    invocation = job.invocation_id()

    os.kill(agent_pid(invocation, "n2"), signal.SIGKILL)
    killed = time.monotonic()
    result = slurm_cluster.wait_job(job_id, timeout=CLEAN_WITHIN_S)
    wait_no_processes(invocation, CLEAN_WITHIN_S - (time.monotonic() - killed))

    assert (result.state, result.exit_code) == ("FAILED", 70), job_log(slurm_cluster, job, job_id)
    assert job.result()["status"] == "unit_failed"


def test_scancel_leaves_nothing_on_any_node(slurm_cluster: SlurmCluster, job: DdsupJob) -> None:
    _long_running(job)
    job_id = job.submit(slurm_cluster)
    job.wait_ready(ALL_LANES)
    invocation = job.invocation_id()
    steps = slurm_cluster.run(["squeue", "-h", "-s", "-j", job_id, "-o", "%j %N"]).stdout
    assert steps.split("\n").count("ddsup-agents n[1-3]") == 1, f"one step for all agents: {steps}"

    slurm_cluster.run(["scancel", job_id])
    cancelled = time.monotonic()
    wait_no_processes(invocation, CLEAN_WITHIN_S)

    assert time.monotonic() - cancelled < CLEAN_WITHIN_S
    assert slurm_cluster.wait_job(job_id).state == "CANCELLED"


def _graceful_lanes(job: DdsupJob) -> None:
    """Lanes that take 1 s to exit on SIGTERM and record that they finished doing so."""
    job.write_units(
        {
            "lane@.toml": tiny_lane_unit("--graceful", "1", "--me", "{instance}"),
            "worker.toml": worker_unit("await-signal", "--marker", "signals", "--limit", "60"),
        }
    )


def test_scancel_batch_term_stops_gracefully_in_order(
    slurm_cluster: SlurmCluster, job: DdsupJob
) -> None:
    _graceful_lanes(job)
    job_id = job.submit(slurm_cluster)
    job.wait_event(lambda e: e.get("instance") == "worker" and e.get("to") == "ready", 30, "")

    slurm_cluster.run(["scancel", "--batch", "--signal=TERM", job_id])
    result = finish(slurm_cluster, job, job_id)

    assert result.exit_code == 128 + signal.SIGTERM, job_log(slurm_cluster, job, job_id)
    assert job.result()["status"] == "stopped"
    stopping = {e["instance"]: e["time"] for e in job.events() if e.get("to") == "stopping"}
    assert stopping["worker"] < min(stopping[lane] for lane in ALL_LANES), stopping
    assert sorted(p.name for p in job.state.glob("graceful-*")) == [
        f"graceful-{lane}" for lane in ALL_LANES
    ]


def test_scancel_gives_lanes_their_graceful_stop(
    slurm_cluster: SlurmCluster, job: DdsupJob
) -> None:
    _graceful_lanes(job)
    job_id = job.submit(slurm_cluster)
    job.wait_event(lambda e: e.get("instance") == "worker" and e.get("to") == "ready", 30, "")

    slurm_cluster.run(["scancel", job_id])
    wait_no_processes(job.invocation_id(), CLEAN_WITHIN_S)

    assert sorted(p.name for p in job.state.glob("graceful-*")) == [
        f"graceful-{lane}" for lane in ALL_LANES
    ]


# -- 6. --signal=B:USR1@N before the time limit ---------------------------------------------


def test_time_limit_warning_signal_reaches_the_worker(
    slurm_cluster: SlurmCluster, job: DdsupJob
) -> None:
    worker = worker_unit(
        "await-signal", "--marker", "signals", "--limit", "90",
        service='forward_signals = ["SIGUSR1"]',
    )  # fmt: skip
    job.write_units({"lane@.toml": tiny_lane_unit(), "worker.toml": worker})

    # slurmctld checks time limits every 30 s and warns when the limit is within N + 30 s,
    # so USR1@20 of a 1-minute job comes 10-40 s in: never before ddsup is up.
    job_id = job.submit(slurm_cluster, "--time=1", "--signal=B:USR1@20")
    result = finish(slurm_cluster, job, job_id, timeout=90)

    assert (result.state, result.exit_code) == ("COMPLETED", 0), job_log(slurm_cluster, job, job_id)
    received = (job.state / "signals").read_text().split()
    assert received[0] == "SIGUSR1", received
    assert any(e.get("reason") == "forwarding SIGUSR1" for e in job.events())


# -- 7. preflight ---------------------------------------------------------------------------


@contextmanager
def _listening(port: int) -> Iterator[None]:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("0.0.0.0", port))
        sock.listen()
        yield


def _free_port_block(count: int) -> int:
    """A base port whose next ``count`` ports are all free right now."""
    for _ in range(100):
        base = free_port()
        try:
            for port in range(base, base + count):
                with socket.socket() as sock:
                    sock.bind(("0.0.0.0", port))
        except OSError:
            continue
        return base
    raise AssertionError(f"no block of {count} free ports found")


def test_port_taken_on_one_node_fails_preflight(slurm_cluster: SlurmCluster, job: DdsupJob) -> None:
    base = _free_port_block(len(ALL_LANES))
    lane = tiny_lane_unit().replace('port = "auto"', f"port = {base}")
    job.write_units({"lane@.toml": lane})
    nodes = [Node(name, "127.0.0.1", tuple(range(GPUS_PER_NODE))) for name in NODES]
    plan = make_plan(load_unit_set(job.units), nodes, client="n1", shared_address=True)
    taken = next(i for i in plan.instances if i.node == "n2")

    with _listening(taken.port or 0):
        job_id = job.submit(slurm_cluster)
        result = finish(slurm_cluster, job, job_id)

    assert (result.state, result.exit_code) == ("FAILED", 69), job_log(slurm_cluster, job, job_id)
    outcome = job.result()
    assert outcome["status"] == "preflight_failed"
    assert f"n2: port {taken.port} planned for {taken.instance}" in str(outcome), outcome
    assert [i["port"] for i in job.lanes()] == [i.port for i in plan.instances]
    started = [e for e in job.events() if e.get("to") in ("waiting", "starting")]
    assert not started, started
    assert not list((job.state / "logs").glob("lane@*"))


# -- 8. a lane that spans two nodes --------------------------------------------------------


def test_two_node_lane_gets_its_specifiers_and_fails_as_a_unit(
    slurm_cluster: SlurmCluster, job: DdsupJob
) -> None:
    specs = ("{rank}", "{nnodes}", "{master_addr}", "{master_port}")
    lane = tiny_lane_unit(
        "--record", "rank{rank}.json", *specs,
        lane="nodes = 2\nreplicas = 1",
    ).replace(
        "restart_sec",
        "exec_follower = "
        + program("lane", "--record", "rank{rank}.json", "--fail-on-file", "fail-now",
                  "--exit-code", "7", *specs)
        + "\nrestart_sec",
    )  # fmt: skip
    job.write_units({"lane@.toml": lane})

    job_id = job.submit(slurm_cluster)
    job.wait_ready(["lane@0"])
    job.wait_event(
        lambda e: e.get("instance") == "lane@0:1" and e.get("to") == "ready", 10, "rank 1 ready"
    )
    planned = {i["instance"]: i for i in job.lanes()}
    master = planned["lane@0"]
    (job.state / "fail-now").touch()
    result = finish(slurm_cluster, job, job_id)

    assert (result.state, result.exit_code) == ("FAILED", 70), job_log(slurm_cluster, job, job_id)
    assert sorted(planned) == ["lane@0", "lane@0:1"]
    assert (master["node"], planned["lane@0:1"]["node"]) == ("n1", "n2")
    for rank, instance in enumerate(("lane@0", "lane@0:1")):
        seen = json.loads((job.state / f"rank{rank}.json").read_text())
        expected = [str(rank), "2", master["master_addr"], str(master["master_port"])]
        assert seen == {
            "argv": expected,
            "rank_env": str(rank),
            "node": planned[instance]["node"],
            "cuda": "0",  # simulated GPUs (--gpus-per-node): index 0 on each node
        }
    outcome = job.result()
    assert (outcome["status"], outcome["cause"]["unit"]) == ("unit_failed", "lane@0:1"), outcome
    assert outcome["cause"]["exit"] == {"code": 7}
    assert job.states("lane@0")[-2:] == ["stopping", "exited"], job.states("lane@0")


def test_status_logs_and_stop_of_a_slurm_run(slurm_cluster: SlurmCluster, job: DdsupJob) -> None:
    """An operator on the batch node sees every node's lanes, reads a remote lane's log
    (written by its agent into the shared state dir), and stops the run like SIGTERM."""
    _long_running(job)
    job_id = job.submit(slurm_cluster)
    job.wait_ready(ALL_LANES)
    ddsup = [sys.executable, "-m", "ddsup"]
    where = ["--state-dir", str(job.state)]

    status = subprocess.run(
        [*ddsup, "status", "--json", *where], capture_output=True, text=True, check=True
    )
    data = json.loads(status.stdout)
    lanes = {i["instance"]: i for i in data["instances"] if i["type"] == "lane"}
    assert data["launcher"] == "slurm"
    assert sorted(lanes) == sorted(ALL_LANES)
    assert {i["node"] for i in lanes.values()} == set(NODES)
    assert all(i["state"] == "ready" and i["pid"] for i in lanes.values())

    # The control channel listens on the client node's allocation address (NodeAddr, here
    # 127.0.0.1), never on every interface.
    run = json.loads((job.state / "run.json").read_text())
    controller = psutil.Process(run["pid"])
    listening = [c.laddr for c in controller.net_connections("tcp") if c.status == "LISTEN"]
    assert [(a.ip, a.port) for a in listening] == [("127.0.0.1", run["control"]["port"])]

    remote = next(name for name, i in lanes.items() if i["node"] == "n3")
    logs = subprocess.run(
        [*ddsup, "logs", remote, *where], capture_output=True, text=True, check=True
    )
    assert (job.state / "logs" / f"{remote}.log").read_text() == logs.stdout

    invocation = job.invocation_id()
    stopped = subprocess.run([*ddsup, "stop", *where], capture_output=True, text=True, check=False)
    assert stopped.returncode == 0, stopped.stderr
    wait_no_processes(invocation, CLEAN_WITHIN_S)
    result = finish(slurm_cluster, job, job_id)
    assert job.result()["status"] == "stopped"
    assert job.result()["exit_code"] == 128 + signal.SIGTERM
    assert result.exit_code == 128 + signal.SIGTERM
    again = subprocess.run([*ddsup, "stop", *where], capture_output=True, text=True, check=False)
    assert again.returncode == 0, "stop is idempotent"


# -- 9. vLLM's process model: retitled, env-cleared, setsid engines --------------------------

VLLM_LIKE = Path(__file__).resolve().parents[1] / "chaos" / "vllm_like.py"


def _vllm_like_job(job: DdsupJob) -> None:
    """Lanes whose engine calls setsid, re-executes itself with a cleared environment
    and retitles itself with setproctitle (clobbering even that environment): nothing
    carries the run's tag, so these tests see the engines through their PID files."""
    argv = [sys.executable, str(VLLM_LIKE), "--clobber", "--env-clear"]
    argv += ["--pid-file", "{state_dir}/engine-{instance}"]
    lane = (
        f'[unit]\ntype = "lane"\n[service]\nexec = {json.dumps(argv)}\nrestart = "no"\n'
        '[lane]\nmodel = "tiny"\ngpus = 1\nport = "auto"\nstagger = "0s"\n'
    )
    worker = worker_unit("await-signal", "--marker", "signals", "--limit", "60")
    job.write_units({"lane@.toml": lane, "worker.toml": worker})


def _engines(job: DdsupJob) -> dict[int, int]:
    """PID → start time of every lane's engine, once all have written their PID file."""
    files = [job.state / f"engine-{lane}" for lane in ALL_LANES]
    wait_until(lambda: all(f.exists() for f in files), 30, lambda: "engines never all up")
    engines = {int(f.read_text()): start_time(int(f.read_text())) for f in files}
    for pid in engines:
        title = Path(f"/proc/{pid}/cmdline").read_bytes()
        environ = Path(f"/proc/{pid}/environ").read_bytes()
        assert title.startswith(b"VLLM::EngineCore") and b"DDSUP_" not in environ
    return {pid: start for pid, start in engines.items() if start is not None}


def _engines_gone_within(engines: dict[int, int], seconds: float) -> float:
    """Seconds until none of ``engines`` is alive (same PID and start time)."""
    began = time.monotonic()
    wait_until(
        lambda: not [p for p, s in engines.items() if start_time(p) == s],
        seconds,
        lambda: "engines alive: " + describe(p for p, s in engines.items() if start_time(p) == s),
    )
    return time.monotonic() - began


def test_vllm_engines_scancel_leaves_nothing(slurm_cluster: SlurmCluster, job: DdsupJob) -> None:
    _vllm_like_job(job)
    job_id = job.submit(slurm_cluster)
    job.wait_ready([*ALL_LANES, "worker"])
    engines = _engines(job)

    slurm_cluster.run(["scancel", job_id])
    _engines_gone_within(engines, CLEAN_WITHIN_S)
    wait_no_processes(job.invocation_id(), CLEAN_WITHIN_S)
    assert slurm_cluster.wait_job(job_id).state == "CANCELLED"


def test_vllm_engines_sigkill_of_start_leaves_nothing(
    slurm_cluster: SlurmCluster, job: DdsupJob
) -> None:
    _vllm_like_job(job)
    job_id = job.submit(slurm_cluster)
    job.wait_ready([*ALL_LANES, "worker"])
    engines = _engines(job)
    run = json.loads((job.state / "run.json").read_text())
    assert run["containment"]["layers"][0].startswith("cgroup"), run["containment"]

    os.kill(run["pid"], signal.SIGKILL)
    took = _engines_gone_within(engines, CLEAN_WITHIN_S)
    wait_no_processes(job.invocation_id(), CLEAN_WITHIN_S)
    slurm_cluster.wait_job(job_id, timeout=CLEAN_WITHIN_S)
    assert took < 2.0, f"engines outlived ddsup start by {took:.2f}s"


def test_vllm_engines_sigkill_of_one_agent_leaves_nothing(
    slurm_cluster: SlurmCluster, job: DdsupJob
) -> None:
    _vllm_like_job(job)
    job_id = job.submit(slurm_cluster)
    job.wait_ready([*ALL_LANES, "worker"])
    engines = _engines(job)
    on_n2 = {
        int((job.state / f"engine-{lane}").read_text())
        for lane in ALL_LANES
        if job.node_of(lane) == "n2"
    }

    os.kill(agent_pid(job.invocation_id(), "n2"), signal.SIGKILL)
    _engines_gone_within({p: s for p, s in engines.items() if p in on_n2}, 2.0)
    result = slurm_cluster.wait_job(job_id, timeout=CLEAN_WITHIN_S)
    _engines_gone_within(engines, CLEAN_WITHIN_S)
    wait_no_processes(job.invocation_id(), CLEAN_WITHIN_S)
    assert (result.state, result.exit_code) == ("FAILED", 70), job_log(slurm_cluster, job, job_id)
