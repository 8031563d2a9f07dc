"""ddsup's own start-up and clean-up overhead inside a real Slurm job (3-node test cluster).

Run: ``.venv/bin/python bench/slurm_startup.py [--runs 5]`` (needs Slurm installed; it
starts a private cluster of three ``slurmd`` on this host, see docs/testing-slurm.md).

Each run is ``sbatch -N3`` of ``exec ddsup start`` with six tiny HTTP lanes (two per
node, ``stagger = "0s"``) and a worker that exits at once. From ``events.jsonl``:

- **overhead** = (``run starting`` → worker ``starting``) minus the slowest lane's own
  ``starting`` → ``ready``: what ddsup adds before the user's work begins (goal ≤ 1 s);
- split into *to first lane start* (plan, ``srun`` of the agent step, agents' Python
  start-up, connect, preflight) and *after the last ready* (until the worker starts);
- **exec → run starting**: the controller's own Python start-up (the job script writes
  a timestamp just before ``exec``).

Then, for the causes: ``srun --overlap -N3 true`` and ``srun --overlap -N3 python -c
'import ddsup.run._agent'`` inside a job (the agent step's floor), and the import time of
``ddsup.run._agent`` here. Last, ``scancel`` of a running job: seconds until no process of
the run is alive on any node (Slurm's ``KillWait`` is 5 s on this cluster).

Bytecode: ``pip install`` compiles every module to bytecode, so an installed ddsup never
compiles Python source at start-up. A source checkout run with ``PYTHONDONTWRITEBYTECODE``
set (as on these sandboxes) does, in every process: about 0.13 s of CPU per agent, 0.3 s
of the overhead on this cluster. So the bench first compiles the checkout's ``ddsup``
(``compileall``, into the ignored ``__pycache__`` folders, as Python itself would), which
is the installed case.
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # tests/support, as ``support`` (as pytest has it)

from tests.slurm.cluster import SlurmCluster, wait_until  # noqa: E402 (needs the path above)
from tests.slurm.jobs import (  # noqa: E402
    DdsupJob,
    run_processes,
    tiny_lane_unit,
    wait_no_processes,
    worker_unit,
)

SRUN_FLOOR = (
    "#!/bin/bash\n"
    't() { local s=$(date +%s.%N); "$@" >/dev/null; echo $(echo "$(date +%s.%N) - $s" | bc); }\n'
    "for i in 1 2 3; do\n"
    "  echo true $(t srun --overlap -N3 --ntasks-per-node=1 true)\n"
    "  echo import $(t srun --overlap -N3 --ntasks-per-node=1 @PY@ -c 'import ddsup.run._agent')\n"
    "done\n"
)


def _units(job: DdsupJob, worker: str) -> None:
    lane = tiny_lane_unit("--stamp", "--me", "{instance}")
    job.write_units({"lane@.toml": lane, "worker.toml": worker})


def _timed_script(job: DdsupJob) -> str:
    stamp = shlex.quote(str(job.root / "exec-time"))
    head, _, exec_line = job.script().partition("\n")
    return f"{head}\ndate +%s.%N > {stamp}\n{exec_line}"


def _startup_run(cluster: SlurmCluster, root: Path) -> dict[str, float]:
    job = DdsupJob(root)
    _units(job, '[unit]\ntype = "worker"\nafter = ["lane"]\n[service]\nexec = ["true"]\n')
    job_id = cluster.sbatch(_timed_script(job), extra_args=["-N3"])
    started = _watch_processes(job)
    result = cluster.wait_job(job_id, timeout=60)
    if result.exit_code != 0:
        raise SystemExit(f"job {job_id} failed:\n{cluster.job_output(job_id)}")
    events = job.events()
    start = job.run_event_time("starting")
    lanes = [lane["instance"] for lane in job.lanes()]

    def first(instance: str, to: str) -> float:
        return min(
            float(e["time"]) for e in events if e.get("instance") == instance and e.get("to") == to
        )

    slowest = max(first(i, "ready") - first(i, "starting") for i in lanes)
    worker = first("worker", "starting")
    first_lane = min(e["time"] for e in events if e.get("instance") in lanes)
    last_ready = max(first(i, "ready") for i in lanes)
    exec_time = float((root / "exec-time").read_text())
    listening = {i: float((job.state / f"listening-{i}").read_text()) for i in lanes}
    # process start times are in clock ticks since boot; the batch shell (which execs
    # ddsup, same PID) started just before it wrote exec-time: that anchors them
    ticks = os.sysconf("SC_CLK_TCK")
    anchor = exec_time - started["controller"] / ticks
    srun = anchor + started["srun"] / ticks
    agents = anchor + started["agents"] / ticks
    return {
        "overhead": worker - start - slowest,
        "to first lane start": first_lane - start,
        "  run starting → srun spawned": srun - start,
        "  srun spawned → last agent exec'd": agents - srun,
        "  last agent exec'd → first lane start": first_lane - agents,
        "after the last ready": worker - last_ready,
        "slowest lane start→ready": slowest,
        "  of it: ddsup's spawn (starting→exec'd)": max(
            anchor + started[f"lane {i}"] / ticks - first(i, "starting") for i in lanes
        ),
        "  of it: lane's own start (exec'd→bound)": max(
            listening[i] - anchor - started[f"lane {i}"] / ticks for i in lanes
        ),
        "  of it: probe latency (bound→ready)": max(
            first(i, "ready") - listening[i] for i in lanes
        ),
        "exec → run starting": start - exec_time,
        "run finished after worker start": job.run_event_time("finished") - worker,
    }


def _start_ticks(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[19])


def _watch_processes(job: DdsupJob) -> dict[str, int]:
    """Start times (ticks) of the controller, its srun and the last agent, seen live."""
    wait_until(lambda: (job.state / "run.json").exists(), 30, lambda: "no run.json")
    invocation, controller = job.invocation_id(), int(job._json("run.json")["pid"])
    seen = {"controller": _start_ticks(controller)}
    agents: dict[int, int] = {}
    lanes: dict[str, int] = {}
    deadline = time.monotonic() + 30
    while len(agents) < 3 or len(lanes) < 6:  # no event for "exec'd": poll /proc
        if time.monotonic() > deadline:
            raise SystemExit(f"did not see srun, agents, lanes of {job.state}: {seen}")
        for pid in run_processes(invocation):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                if argv[0].endswith(b"srun"):
                    seen.setdefault("srun", _start_ticks(pid))
                elif argv[1:4] == [b"-m", b"ddsup", b"agent"]:
                    agents.setdefault(pid, _start_ticks(pid))
                elif argv[2:3] == [b"lane"]:
                    lanes.setdefault(argv[argv.index(b"--me") + 1].decode(), _start_ticks(pid))
            except (OSError, IndexError, ValueError):
                continue
        time.sleep(0.01)
    seen["agents"] = max(agents.values())
    seen.update({f"lane {name}": ticks for name, ticks in lanes.items()})
    return seen


def _scancel_run(cluster: SlurmCluster, root: Path) -> float:
    job = DdsupJob(root)
    _units(job, worker_unit("await-signal", "--marker", "signals", "--limit", "60"))
    job_id = job.submit(cluster)
    job.wait_event(lambda e: e.get("instance") == "worker" and e.get("to") == "starting", 30, "")
    invocation = job.invocation_id()
    began = time.monotonic()
    cluster.run(["scancel", job_id])
    wait_no_processes(invocation, 30)
    took = time.monotonic() - began
    cluster.wait_job(job_id)
    assert not run_processes(invocation)
    return took


def _srun_floor(cluster: SlurmCluster, root: Path) -> dict[str, float]:
    job_id = cluster.sbatch(
        SRUN_FLOOR.replace("@PY@", shlex.quote(sys.executable)), extra_args=["-N3"]
    )
    cluster.wait_job(job_id, timeout=60)
    samples: dict[str, list[float]] = {}
    for line in cluster.job_output(job_id).split("\n"):
        if line.strip():
            name, value = line.split()
            samples.setdefault(name, []).append(float(value))
    return {
        "srun --overlap -N3 true": statistics.median(samples["true"]),
        "srun --overlap -N3 python -c 'import ddsup.run._agent'": statistics.median(
            samples["import"]
        ),
    }


def _import_time() -> tuple[float, float]:
    """Median wall and CPU (user + sys) seconds of ``python -c 'import ddsup.run._agent'``.

    The CPU figure does not depend on how busy the machine is; the wall figure does.
    """
    argv = [sys.executable, "-c", "import ddsup.run._agent"]
    walls, cpus = [], []
    for _ in range(5):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        began = time.perf_counter()
        subprocess.run(argv, check=True)
        walls.append(time.perf_counter() - began)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(walls), statistics.median(cpus)


def _row(name: str, values: list[float]) -> str:
    return f"{name:<52} {statistics.median(values):7.2f} s  ({min(values):.2f}–{max(values):.2f})"


def _compile_bytecode() -> None:
    """What ``pip install`` does for an installed ddsup (a no-op where it is compiled)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    package = ROOT / "supervisor" / "ddsup"
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(package)], env=env, check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="jobs per figure (default 5)")
    args = parser.parse_args()
    _compile_bytecode()
    with tempfile.TemporaryDirectory(prefix="ddsup-bench-") as tmp:
        cluster = SlurmCluster.start(Path(tmp, "cluster"))
        try:
            runs = [_startup_run(cluster, Path(tmp, f"run{i}")) for i in range(args.runs)]
            cancels = [_scancel_run(cluster, Path(tmp, f"cancel{i}")) for i in range(args.runs)]
            floor = _srun_floor(cluster, Path(tmp))
        finally:
            cluster.stop()
    print(
        f"ddsup on a 3-node Slurm test cluster, 6 tiny lanes, bytecode compiled; "
        f"median of {args.runs} jobs"
    )
    for key in runs[0]:
        print(_row(key, [run[key] for run in runs]))
    print(_row("scancel → no process of the run left", cancels))
    for name, value in floor.items():
        print(f"{name:<52} {value:7.2f} s  (median of 3)")
    wall, cpu = _import_time()
    print(f"{'python -c import ddsup.run._agent (here), wall':<52} {wall:7.2f} s")
    print(f"{'python -c import ddsup.run._agent (here), CPU':<52} {cpu:7.2f} s")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
