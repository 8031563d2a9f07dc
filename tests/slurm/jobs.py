"""Build a ddsup run for a real ``sbatch`` job, and observe it from outside.

A :class:`DdsupJob` is one directory with ``units/`` (the unit files a test writes) and
``state/`` (ddsup's state dir, on the "shared file system": every node of the test
cluster is this machine). Its batch script is the one line a user writes,
``exec ddsup start …``: with ``exec`` ddsup *is* the batch shell's process, which is what
``#SBATCH --signal=B:…`` and ``scancel`` reach. Everything a test asserts on comes from
what ddsup writes (``run.json``, ``plan.json``, ``events.jsonl``, ``result.json``) and
from ``/proc``: a process belongs to the run when its environment carries the run's
``DDSUP_INVOCATION_ID``.
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from support import procs

from .cluster import JobResult, SlurmCluster, wait_until

PROGRAMS = Path(__file__).with_name("job_programs.py")
"""The lanes and workers that the tests' units run (see ``job_programs.py``)."""

GPUS_PER_NODE = 2


def program(*args: str) -> str:
    """A TOML argv array that runs ``job_programs.py`` with this interpreter."""
    return json.dumps([sys.executable, str(PROGRAMS), *args])


def tiny_lane_unit(
    *args: str, restart: str = "no", service: str = "", lane: str = "", ready: bool = True
) -> str:
    """A lane unit around ``job_programs.py lane`` (starts in ~0.1 s, HTTP on {port})."""
    probe = '[ready]\nhttp = "http://{host}:{port}/health"\ninterval = "50ms"\n' if ready else ""
    return (
        '[unit]\ntype = "lane"\n[service]\n'
        f"exec = {program('lane', '--port', '{port}', *args)}\n"
        f'restart = "{restart}"\nrestart_sec = "100ms"\ntimeout_start = "20s"\n'
        f'timeout_stop = "3s"\n{service}\n{probe}'
        f'[lane]\nmodel = "tiny"\ngpus = 1\nport = "auto"\nstagger = "0s"\n{lane}\n'
    )


def worker_unit(*args: str, service: str = "", after: Sequence[str] = ("lane",)) -> str:
    """A worker unit around ``job_programs.py``, started once ``after`` units are ready
    (without an endpoint nothing else makes a worker wait for the lanes)."""
    unit = f'[unit]\ntype = "worker"\nafter = {json.dumps(list(after))}\n'
    return f"{unit}[service]\nexec = {program(*args)}\n{service}\n"


@dataclass(frozen=True)
class DdsupJob:
    """One run's directories and the view of it that ddsup's files give."""

    root: Path
    start_args: Sequence[str] = field(default=("--gpus-per-node", str(GPUS_PER_NODE)))

    @property
    def units(self) -> Path:
        return self.root / "units"

    @property
    def state(self) -> Path:
        return self.root / "state"

    def write_units(self, files: dict[str, str]) -> DdsupJob:
        self.units.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (self.units / name).write_text(text)
        return self

    def script(self) -> str:
        argv = [sys.executable, "-m", "ddsup", "start", str(self.units), *self.start_args]
        argv += ["--state-dir", str(self.state), "-v"]
        return "#!/bin/bash\nexec " + shlex.join(argv) + "\n"

    def submit(self, cluster: SlurmCluster, *sbatch_args: str) -> str:
        return cluster.sbatch(self.script(), extra_args=["-N3", *sbatch_args])

    # -- what ddsup wrote ---------------------------------------------------------------

    def invocation_id(self) -> str:
        return str(self._json("run.json")["invocation_id"])

    def plan(self) -> dict[str, Any]:
        return self._json("plan.json")

    def result(self) -> dict[str, Any]:
        return self._json("result.json")

    def events(self) -> list[dict[str, Any]]:
        path = self.state / "events.jsonl"
        if not path.exists():
            return []
        lines = path.read_text().splitlines()
        return [json.loads(line) for line in lines if line.endswith("}")]

    def unit_events(self, instance: str) -> list[dict[str, Any]]:
        return [
            e for e in self.events() if e.get("event") == "unit" and e.get("instance") == instance
        ]

    def states(self, instance: str) -> list[str]:
        return [str(e["to"]) for e in self.unit_events(instance)]

    def lanes(self) -> list[dict[str, Any]]:
        return [i for i in self.plan()["instances"] if i["type"] == "lane"]

    def node_of(self, instance: str) -> str:
        return next(str(i["node"]) for i in self.plan()["instances"] if i["instance"] == instance)

    def run_event_time(self, reason: str) -> float:
        return next(
            float(e["time"])
            for e in self.events()
            if e.get("event") == "run" and e.get("reason") == reason
        )

    def _json(self, name: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.state / name).read_text())
        return data

    # -- waiting ------------------------------------------------------------------------

    def wait_event(
        self, match: Callable[[dict[str, Any]], bool], timeout: float, what: str
    ) -> dict[str, Any]:
        """Poll ``events.jsonl`` (bounded) until an event matches; that event."""
        found: list[dict[str, Any]] = []

        def seen() -> bool:
            found[:] = [e for e in self.events() if match(e)]
            return bool(found)

        wait_until(seen, timeout, lambda: f"no event {what} in {self.state}: {self.events()}")
        return found[0]

    def wait_ready(self, instances: Iterable[str], timeout: float = 30.0) -> None:
        wanted = set(instances)
        wait_until(
            lambda: wanted <= {e.get("instance") for e in self.events() if e.get("to") == "ready"},
            timeout,
            lambda: f"{sorted(wanted)} never all ready: {self.events()}",
        )


def run_processes(invocation_id: str) -> list[int]:
    """Live processes on this machine (= on every node) that carry the run's id."""
    return sorted(procs.carrying("DDSUP_INVOCATION_ID", invocation_id))


def describe(pids: Iterable[int]) -> str:
    return "\n".join(f"{pid}: {' '.join(procs.cmdline(pid)) or '(gone)'}" for pid in pids)


def wait_no_processes(invocation_id: str, timeout: float) -> float:
    """Seconds until no process of the run is alive; fails after ``timeout``."""
    began = time.monotonic()
    wait_until(
        lambda: not run_processes(invocation_id),
        timeout,
        lambda: "still alive:\n" + describe(run_processes(invocation_id)),
    )
    return time.monotonic() - began


def agent_pid(invocation_id: str, node: str) -> int:
    """The ``ddsup agent`` process of the run on ``node`` (not srun, not a lane)."""
    for pid in run_processes(invocation_id):
        argv = procs.cmdline(pid)
        if (
            argv[1:4] == ["-m", "ddsup", "agent"]
            and procs.environ(pid).get(b"SLURMD_NODENAME") == node.encode()
        ):
            return pid
    raise AssertionError(f"no ddsup agent of run {invocation_id} on {node}")


def finish(cluster: SlurmCluster, job: DdsupJob, job_id: str, timeout: float = 60.0) -> JobResult:
    """Wait for the job's end; then no process of the run may be alive (docs/no-orphans.md)."""
    result = cluster.wait_job(job_id, timeout=timeout)
    leftovers = run_processes(job.invocation_id())
    assert not leftovers, "alive after the job ended:\n" + describe(leftovers)
    return result


def job_log(cluster: SlurmCluster, job: DdsupJob, job_id: str) -> str:
    """The batch output and agents.log, for assertion messages."""
    agents = job.state / "logs" / "agents.log"
    text = agents.read_text() if agents.exists() else "(no agents.log)"
    return f"--- job output ---\n{cluster.job_output(job_id)}\n--- agents.log ---\n{text}"


def release_when_requeued(
    cluster: SlurmCluster, job_id: str, restarts: int = 1, timeout: float = 60.0
) -> None:
    """A requeued job (its ``restarts``-th time) waits two minutes before it may start
    again: start it sooner.

    Not at once: each node revoked the first attempt's credential when it ended it, and
    slurmd refuses a credential created in the same second as (or before) that
    revocation ("Killing non-startable batch job: Job credential revoked", the job
    FAILED with exit 1). Credentials have one-second resolution, so the job may start
    two seconds on; that wait is Slurm's scheduler's, not a sleep here.
    """

    def requeued() -> bool:
        info = cluster.job_info(job_id)
        return info.get("JobState") == "PENDING" and info.get("Restarts") == str(restarts)

    wait_until(
        requeued,
        timeout,
        lambda: f"job {job_id} was not requeued: {cluster.job_info(job_id)}",
    )
    cluster.run(["scontrol", "update", f"jobid={job_id}", "StartTime=now+2"])
