"""From the login node: ``ddsup submit``, then ``status|logs|stop|report --job`` and ``runs``.

Each test is what a user does who never writes a batch script and never logs into a
compute node: unit files and a ``job.toml`` in, ``ddsup submit``, then the ``--job``
commands, run as separate processes as a user types them, against the session's real
3-node cluster. Where the job ends, no process of its run may be left on any node.
Slurm is the test cluster's, which has no accounting storage: these commands read
``squeue`` (``sacct`` answers "accounting storage is disabled", which they note).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from support.ports import free_port

from .cluster import SlurmCluster, wait_until
from .jobs import describe, release_when_requeued, run_processes, tiny_lane_unit, worker_unit

pytestmark = pytest.mark.slurm

REHEARSAL = Path(__file__).resolve().parents[2] / "units" / "examples" / "rehearsal"
PROMPTS = 48


@dataclass(frozen=True)
class User:
    """A user on the login node: their own config and state directories, the cluster's
    Slurm on PATH, and a directory of units per job."""

    cluster: SlurmCluster
    home: Path

    def env(self) -> dict[str, str]:
        return {
            **self.cluster.env,
            "XDG_CONFIG_HOME": str(self.home / "config"),
            "XDG_STATE_HOME": str(self.home / "state"),
        }

    def ddsup(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """``ddsup ARGS`` as the user types it, in their home directory."""
        return subprocess.run(
            [sys.executable, "-m", "ddsup", *args],
            env=self.env(),
            cwd=self.home,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def units(self, name: str, files: dict[str, str], job: str) -> Path:
        """A unit directory with its ``job.toml`` (the shape; state under home/runs)."""
        directory = self.home / name
        directory.mkdir(parents=True)
        for file, text in files.items():
            (directory / file).write_text(text)
        root = self.home / "runs"
        shape = f'nodes = 3\ngpus_per_node = 2\ntime = "10m"\nstate_root = "{root}"\n'
        (directory / "job.toml").write_text(f"[job]\n{shape}{job}")
        return directory

    def submit(self, units: Path, *more: str) -> str:
        done = self.ddsup("submit", str(units), *more)
        assert done.returncode == 0, done.stderr
        found = re.search(r"^submitted job (\d+) ", done.stdout, re.MULTILINE)
        assert found, done.stdout
        return found.group(1)

    def status(self, job_id: str) -> dict[str, Any]:
        done = self.ddsup("status", "--job", job_id, "--json")
        assert done.returncode == 0, done.stderr
        data: dict[str, Any] = json.loads(done.stdout)
        return data

    def wait_phase(self, job_id: str, phases: Sequence[str], timeout: float = 60.0) -> None:
        seen: list[dict[str, Any]] = []

        def reached() -> bool:
            seen[:] = [self.status(job_id)["job"]]
            return bool(seen[0]["phase"] in phases)

        wait_until(reached, timeout, lambda: f"job {job_id} never {phases}: {seen}")


@pytest.fixture
def user(slurm_cluster: SlurmCluster, tmp_path: Path) -> User:
    if slurm_cluster.gpus_per_node < 2:
        pytest.skip("ddsup submit asks Slurm for GPUs: the test cluster has none (not root)")
    return User(slurm_cluster, tmp_path)


def _rehearsal(prompts: int = PROMPTS) -> dict[str, str]:
    """The rehearsal's units: fake-vllm lanes, the endpoint on a free port, the worker
    sending ``prompts`` prompts."""
    lane = (REHEARSAL / "lane@.toml").read_text()
    endpoint = (REHEARSAL / "endpoint.toml").read_text()
    worker = (REHEARSAL / "worker.toml").read_text()
    return {
        "lane@.toml": lane,
        "endpoint.toml": endpoint.replace("port = 9000", f"port = {free_port()}"),
        "worker.toml": worker.replace(
            '"{unit_dir}/generate.py"', f'"{{unit_dir}}/generate.py", "--limit", "{prompts}"'
        ),
        "generate.py": (REHEARSAL / "generate.py").read_text(),
        "prompts.jsonl": (REHEARSAL / "prompts.jsonl").read_text(),
    }


def _idle() -> dict[str, str]:
    """Units whose worker ddsup never starts in these tests (the job ends before)."""
    worker = worker_unit("await-signal", "--marker", "signals", "--limit", "5")
    return {"lane@.toml": tiny_lane_unit(), "worker.toml": worker}


def _assert_nothing_left(run: dict[str, Any]) -> None:
    leftovers = run_processes(str(run["invocation_id"]))
    assert not leftovers, "alive after the job ended:\n" + describe(leftovers)


def test_a_submitted_job_is_followed_from_the_login_node_to_its_report(user: User) -> None:
    units = user.units("rehearsal", _rehearsal(), "")
    job_id = user.submit(units)
    user.wait_phase(job_id, ["running", "finished"])
    follow = user.ddsup("logs", "--job", job_id, "-f", "worker", timeout=120)
    user.wait_phase(job_id, ["finished"])  # Slurm ends the job a moment after ddsup
    done = user.status(job_id)
    text = user.ddsup("status", "--job", job_id).stdout
    report = user.ddsup("report", "--job", job_id)
    runs = user.ddsup("runs").stdout

    assert follow.returncode == 0, follow.stderr
    assert f"finished: {PROMPTS}/{PROMPTS} done, 0 failed" in follow.stdout, follow.stdout
    state = user.home / "runs" / "rehearsal"
    assert (done["job"]["phase"], done["state_dir"]) == ("finished", str(state)), done
    assert done["result"]["status"] == "ok", done
    assert text.startswith(f"job {job_id} (rehearsal): COMPLETED, exit 0: ok, exit 0"), text
    assert report.returncode == 0 and (state / "report.html").is_file(), report.stderr
    row = next(line for line in runs.splitlines() if f" {job_id} " in line)
    assert "COMPLETED" in row and "ok, exit 0" in row, runs
    assert (state / "job.sh").read_text().count("exec ") == 1  # kept: sbatch it to resume
    _assert_nothing_left(done)


def test_a_pending_job_says_why_it_waits_and_stop_cancels_it(user: User) -> None:
    units = user.units("later", _rehearsal(), "")
    job_id = user.submit(units, "--", "--begin=now+1hour")

    def waits_for_its_time() -> bool:
        return bool(user.status(job_id)["job"]["slurm"]["reason"] == "BeginTime")

    wait_until(waits_for_its_time, 30, lambda: str(user.status(job_id)))
    pending = user.ddsup("status", "--job", job_id).stdout
    listed = user.ddsup("runs").stdout
    stop = user.ddsup("stop", "--job", job_id)
    after = user.status(job_id)["job"]

    assert pending == f"job {job_id} (later): pending: waits for its start time (BeginTime)\n"
    assert "PENDING (BeginTime)" in listed, listed
    assert stop.returncode == 0 and "cancelled, nothing of it ran" in stop.stdout, stop
    assert after["phase"] == "ended_before_start" and after["slurm"]["state"] == "CANCELLED"


def test_stop_job_ends_a_running_job_in_order(user: User) -> None:
    worker = worker_unit("await-signal", "--marker", "signals", "--limit", "120")
    units = user.units("stoppable", {"lane@.toml": tiny_lane_unit(), "worker.toml": worker}, "")
    job_id = user.submit(units)
    state = user.home / "runs" / "stoppable"
    wait_until(lambda: _reached(state, "worker", "ready"), 60, lambda: str(_events(state)))
    stop = user.ddsup("stop", "--job", job_id, timeout=120)
    done = user.status(job_id)

    assert stop.returncode == 0, stop.stderr
    said = stop.stdout.splitlines()
    assert said[0] == f"ddsup: stopping job {job_id}: SIGTERM to ddsup start …", said
    assert said[-1].startswith(f"ddsup: job {job_id} stopped: FAILED, exit 143: stopped"), said
    assert (done["result"]["status"], done["result"]["exit_code"]) == ("stopped", 143), done
    info = user.cluster.job_info(job_id)
    assert (info["JobState"], info["ExitCode"]) == ("FAILED", "143:0"), info
    assert (state / "signals").read_text().startswith("SIGTERM "), "the worker got SIGTERM"
    worker_gone = _time(state, "worker", "exited")
    lanes_stop = min(_time(state, lane, "stopping") for lane in _lanes(state))
    assert worker_gone <= lanes_stop, "the worker ends before the lanes are stopped"
    _assert_nothing_left(done)


def test_a_job_cancelled_before_ddsup_started_reads_so(user: User) -> None:
    setup = 'setup = ["echo preparing the node", "sleep 120"]\n'
    units = user.units("slow-setup", _idle(), setup)
    job_id = user.submit(units)
    user.wait_phase(job_id, ["starting"])
    starting = user.ddsup("status", "--job", job_id).stdout
    user.cluster.run(["scancel", job_id])
    user.wait_phase(job_id, ["ended_before_start"])
    after = user.ddsup("status", "--job", job_id).stdout
    logs = user.ddsup("logs", "--job", job_id)
    report = user.ddsup("report", "--job", job_id)

    assert "RUNNING on n[1-3]" in starting and "ddsup has not started yet" in starting, starting
    assert f"job {job_id} (slow-setup): CANCELLED, signal 15 before ddsup started" in after, after
    assert "preparing the node" in after, "status shows the end of the batch output"
    assert logs.returncode == 0 and logs.stdout.startswith("preparing the node\n"), logs
    assert f"*** JOB {job_id} ON n1 CANCELLED AT " in logs.stdout, "Slurm's own line too"
    assert report.returncode == 1 and "has no run" in report.stderr, report.stderr


def test_a_job_whose_script_failed_before_ddsup_started_shows_why(user: User) -> None:
    setup = 'setup = ["echo module cuda/99 not found >&2", "exit 3"]\n'
    units = user.units("bad-setup", _idle(), setup)
    job_id = user.submit(units)
    user.wait_phase(job_id, ["ended_before_start"])
    text = user.ddsup("status", "--job", job_id).stdout

    assert f"job {job_id} (bad-setup): FAILED, exit 3 before ddsup started" in text, text
    assert "  module cuda/99 not found" in text, text


def test_a_requeued_job_reads_requeued_then_runs_its_next_attempt(user: User) -> None:
    record = user.home / "attempts.txt"
    worker = worker_unit("attempts", "--record", str(record), "--until", "1")
    files = {"lane@.toml": tiny_lane_unit(), "worker.toml": worker}
    units = user.units("requeued", files, "requeue = true\n")
    job_id = user.submit(units)
    user.wait_phase(job_id, ["requeued"], timeout=90)
    requeued = user.ddsup("status", "--job", job_id).stdout
    release_when_requeued(user.cluster, job_id)
    user.wait_phase(job_id, ["finished"], timeout=90)
    done = user.status(job_id)

    assert "requeued: the next attempt waits for its start time (BeginTime)" in requeued
    assert "attempt 0 ended requeued, exit 85" in requeued, requeued
    assert (done["attempt"], done["result"]["status"]) == (1, "ok"), done
    assert done["job"]["slurm"]["restarts"] == 1, done["job"]
    assert [line.split()[0] for line in record.read_text().splitlines()] == ["0", "1"]
    _assert_nothing_left(done)


def test_preflight_names_each_node_whose_ddsup_is_not_the_submitters(user: User) -> None:
    """Every node's agent compares its ddsup with the one that submitted (exported in the
    script). Here ddsup start is not told which (it would refuse first, on n1 alone), and
    the agents' step is told another version was submitted: srun sets a variable its
    ``--export`` names only where the environment does not have it."""
    other = (
        'setup = ["unset DDSUP_SUBMIT_VERSION"]\n'
        'srun_args = ["--export=ALL,DDSUP_SUBMIT_VERSION=0.0.9"]\n'
    )
    units = user.units("mixed", _idle(), other)
    job_id = user.submit(units)
    user.wait_phase(job_id, ["finished"], timeout=90)
    done = user.status(job_id)

    result = done["result"]
    assert (result["status"], result["exit_code"]) == ("preflight_failed", 69), result
    reason = result["cause"]["reason"]
    for node in user.cluster.nodes():
        assert f"{node}: ddsup 0.1.0 here, but the job was submitted with ddsup 0.0.9" in reason
    assert "install the same ddsup and Python" in reason, reason


def _reached(state: Path, instance: str, to: str) -> bool:
    return any(e.get("instance") == instance and e.get("to") == to for e in _events(state))


def _events(state: Path) -> list[dict[str, Any]]:
    path = state / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def _lanes(state: Path) -> list[str]:
    plan = json.loads((state / "plan.json").read_text())
    return [i["instance"] for i in plan["instances"] if i["type"] == "lane"]


def _time(state: Path, instance: str, to: str) -> float:
    """When ``instance`` last went ``to`` that state (events.jsonl)."""
    times = [
        float(e["time"])
        for e in _events(state)
        if e.get("instance") == instance and e.get("to") == to
    ]
    assert times, f"{instance} never went {to}: {_events(state)}"
    return times[-1]
