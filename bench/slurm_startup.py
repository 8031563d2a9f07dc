"""ddsup's own start-up and clean-up overhead inside a real Slurm job (3-node test cluster).

Run: ``.venv/bin/python bench/slurm_startup.py [--runs 5] [--baseline REV] [--raw PATH]``
(``--raw``: every job's figures as JSON, to pool several runs; needs Slurm
installed; it starts a private cluster of three ``slurmd`` on this host, see
docs/testing-slurm.md).

ddsup is installed as a user installs it: a wheel of the checkout (``pip wheel``) into a
fresh virtual environment (``pip install`` compiles every module to bytecode), and the
job script runs that environment's ``ddsup`` console script. ``--baseline REV`` builds
a second wheel from that revision's tree (``side_by_side.py``) into a second environment,
and the jobs of both alternate, so before and after come from one run.

Each run is ``sbatch -N3`` of ``exec ddsup start`` with six tiny HTTP lanes (two per
node, ``stagger = "0s"``) and a worker that exits at once. The job script writes a
timestamp just before ``exec``. From it and ``events.jsonl``:

- **overhead, end to end** = (exec of ``ddsup start`` → the worker's ``starting``) minus
  the slowest lane's own exec → listening (its process start time, from ``/proc``, to the
  moment it bound its port, which it writes down): everything ddsup adds before the
  user's work begins, its own Python start-up included (goal ≤ 1 s);
- split into *exec → srun spawned* (what ``ddsup start`` does before it launches the
  agents), *exec → run starting* (its whole Python start-up: the controller is imported
  after the agents' step is spawned, so this overlaps the next rows), *srun spawned → last agent forked*, *last agent forked → first lane start* (the
  agents' Python start-up, connect, set-up, preflight), the lanes, and *after the last
  ready* (until the worker starts);
- **overhead from run starting** = (``run starting`` → worker ``starting``) minus the
  slowest lane's own ``starting`` → ``ready``, which leaves out ``ddsup start``'s own
  start-up.

Then, for the causes: ``srun --overlap -N3 true`` and ``srun --overlap -N3 python -c
'import ddsup.agent._agent'`` inside a job (the agent step's floor), and the import time of
``ddsup.agent._agent`` here. Last, ``scancel`` of a running job: seconds until no process of
the run is alive on any node (Slurm's ``KillWait`` is 5 s on this cluster).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from side_by_side import export_tree

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # tests/support, as ``support`` (as pytest has it)

from tests.slurm.cluster import SlurmCluster, wait_until  # noqa: E402
from tests.slurm.jobs import (  # noqa: E402
    DdsupJob,
    run_processes,
    tiny_lane_unit,
    wait_no_processes,
    worker_unit,
)

from support import procs  # noqa: E402 (needs the path above)

SRUN_FLOOR = (
    "#!/bin/bash\n"
    't() { local s=$(date +%s.%N); "$@" >/dev/null; echo $(echo "$(date +%s.%N) - $s" | bc); }\n'
    "for i in 1 2 3; do\n"
    "  echo true $(t srun --overlap -N3 --ntasks-per-node=1 true)\n"
    "  echo import $(t srun --overlap -N3 --ntasks-per-node=1 @PY@ -c 'import ddsup.agent._agent')\n"
    "done\n"
)


@dataclass(frozen=True)
class Install:
    """One installed ddsup: a fresh virtual environment with a wheel in it."""

    name: str
    venv: Path

    @property
    def python(self) -> str:
        return str(self.venv / "bin" / "python")

    @property
    def ddsup(self) -> str:
        return str(self.venv / "bin" / "ddsup")


def install(name: str, source: Path, work: Path) -> Install:
    """``pip wheel`` of ``source``, then ``pip install`` of it into a new venv (compiled)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    wheels, venv = work / f"wheel-{name}", work / f"venv-{name}"
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    _quiet([*pip, "wheel", "--no-deps", "-w", str(wheels), str(source)])
    _quiet([sys.executable, "-m", "venv", str(venv)])
    [wheel] = wheels.glob("*.whl")
    venv_pip = [str(venv / "bin" / "python"), "-m", "pip", "-q", "--disable-pip-version-check"]
    _quiet([*venv_pip, "install", str(wheel)], env=env)
    return Install(name, venv)


def _quiet(argv: list[str], env: dict[str, str] | None = None) -> None:
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"bench: {argv[:4]} failed:\n{done.stdout}{done.stderr}")


def _units(job: DdsupJob, worker: str) -> None:
    lane = tiny_lane_unit("--stamp", "--me", "{instance}")
    job.write_units({"lane@.toml": lane, "worker.toml": worker})


def _timed_script(job: DdsupJob, ddsup: Install) -> str:
    """The one line a user writes, with the installed ``ddsup``, and a stamp before it."""
    stamp = shlex.quote(str(job.root / "exec-time"))
    argv = [ddsup.ddsup, "start", str(job.units), *job.start_args]
    argv += ["--state-dir", str(job.state), "-v"]
    return f"#!/bin/bash\ndate +%s.%N > {stamp}\nexec {shlex.join(argv)}\n"


def _startup_run(cluster: SlurmCluster, root: Path, ddsup: Install) -> dict[str, float]:
    job = DdsupJob(root)
    _units(job, '[unit]\ntype = "worker"\nafter = ["lane"]\n[service]\nexec = ["true"]\n')
    job_id = cluster.sbatch(_timed_script(job, ddsup), extra_args=["-N3"])
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
    # process start times are clock ticks (10 ms) after boot, on CLOCK_BOOTTIME
    ticks = os.sysconf("SC_CLK_TCK")
    boot = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)
    srun = boot + started["srun"] / ticks
    agents = boot + started["agents"] / ticks
    lane_exec = {i: boot + started[f"lane {i}"] / ticks for i in lanes}
    own = max(listening[i] - lane_exec[i] for i in lanes)  # fork/exec → listening
    return {
        "overhead, end to end (exec → worker − lane's own)": worker - exec_time - own,
        "  exec → srun spawned": srun - exec_time,
        "  exec → run starting (controller start-up)": start - exec_time,
        "  srun spawned → last agent forked": agents - srun,
        "  last agent forked → first lane start (its start-up)": first_lane - agents,
        "  first lane start → last ready": last_ready - first_lane,
        "    of it: the slowest lane's own exec → listening": own,
        "  last ready → worker starting": worker - last_ready,
        "overhead from run starting": worker - start - slowest,
        "slowest lane starting → ready": slowest,
        "  of it: ddsup's spawn (starting → forked)": max(
            lane_exec[i] - first(i, "starting") for i in lanes
        ),
        "  of it: probe latency (listening → ready)": max(
            first(i, "ready") - listening[i] for i in lanes
        ),
        "run finished after worker start": job.run_event_time("finished") - worker,
    }


def _start_ticks(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[19])


def _watch_processes(job: DdsupJob) -> dict[str, int]:
    """Start times (ticks) of the controller, its srun and the last agent, seen live."""
    wait_until(lambda: (job.state / "run.json").exists(), 30, lambda: "no run.json")
    invocation, controller = job.invocation_id(), int(job._json("run.json")["pid"])
    seen = {"controller": _start_ticks(controller)}
    agents: dict[bytes, int] = {}  # node → the first fork: an agent's own children (its
    lanes: dict[str, int] = {}  # sentinel) carry its argv from their fork to their exec
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
                    node = procs.environ(pid).get(b"SLURMD_NODENAME", b"?")
                    agents[node] = min(agents.get(node, 1 << 62), _start_ticks(pid))
                elif argv[2:3] == [b"lane"]:
                    lanes.setdefault(argv[argv.index(b"--me") + 1].decode(), _start_ticks(pid))
            except (OSError, IndexError, ValueError):
                continue
        time.sleep(0.01)
    seen["agents"] = max(agents.values())
    seen.update({f"lane {name}": ticks for name, ticks in lanes.items()})
    return seen


def _scancel_run(cluster: SlurmCluster, root: Path, ddsup: Install) -> float:
    job = DdsupJob(root)
    _units(job, worker_unit("await-signal", "--marker", "signals", "--limit", "60"))
    job_id = cluster.sbatch(_timed_script(job, ddsup), extra_args=["-N3"])
    job.wait_event(lambda e: e.get("instance") == "worker" and e.get("to") == "starting", 30, "")
    invocation = job.invocation_id()
    began = time.monotonic()
    cluster.run(["scancel", job_id])
    wait_no_processes(invocation, 30)
    took = time.monotonic() - began
    cluster.wait_job(job_id)
    assert not run_processes(invocation)
    return took


def _srun_floor(cluster: SlurmCluster, ddsup: Install) -> dict[str, float]:
    job_id = cluster.sbatch(
        SRUN_FLOOR.replace("@PY@", shlex.quote(ddsup.python)), extra_args=["-N3"]
    )
    cluster.wait_job(job_id, timeout=60)
    samples: dict[str, list[float]] = {}
    for line in cluster.job_output(job_id).split("\n"):
        if line.strip():
            name, value = line.split()
            samples.setdefault(name, []).append(float(value))
    return {
        "srun --overlap -N3 true": statistics.median(samples["true"]),
        "srun --overlap -N3 python -c 'import ddsup.agent._agent'": statistics.median(
            samples["import"]
        ),
    }


def _import_time(ddsup: Install, module: str) -> tuple[float, float]:
    """Median wall and CPU (user + sys) seconds of ``python -c 'import MODULE'``.

    The CPU figure depends less on how busy the machine is than the wall figure.
    """
    argv = [ddsup.python, "-c", f"import {module}"]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="jobs per figure (default 5)")
    parser.add_argument("--baseline", metavar="REV", help="also measure ddsup as of REV")
    parser.add_argument(
        "--raw", type=Path, metavar="PATH", help="also write every job's figures there (JSON)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ddsup-bench-") as tmp:
        work = Path(tmp)
        installs = [install("checkout", ROOT, work)]
        if args.baseline:
            source = export_tree(args.baseline, work / "baseline-src")
            installs.insert(0, install(args.baseline, source, work))
        cluster = SlurmCluster.start(work / "cluster")
        runs: dict[str, list[dict[str, float]]] = {i.name: [] for i in installs}
        cancels: dict[str, list[float]] = {i.name: [] for i in installs}
        try:
            for index in range(args.runs):  # the installs alternate, run by run
                for ddsup in installs:
                    root = work / f"{ddsup.name}-run{index}"
                    runs[ddsup.name].append(_startup_run(cluster, root, ddsup))
            for index in range(args.runs):
                for ddsup in installs:
                    root = work / f"{ddsup.name}-cancel{index}"
                    cancels[ddsup.name].append(_scancel_run(cluster, root, ddsup))
            floor = _srun_floor(cluster, installs[-1])
        finally:
            cluster.stop()
        _print(args.runs, installs, runs, cancels, floor)
        if args.raw is not None:  # to pool the jobs of several runs
            raw = {i.name: {"jobs": runs[i.name], "scancel": cancels[i.name]} for i in installs}
            args.raw.write_text(json.dumps(raw, indent=1))


def _print(
    count: int,
    installs: list[Install],
    runs: dict[str, list[dict[str, float]]],
    cancels: dict[str, list[float]],
    floor: dict[str, float],
) -> None:
    print(
        f"ddsup on a 3-node Slurm test cluster, 6 tiny lanes, installed from a wheel into a "
        f"fresh venv; median (min–max) of {count} jobs each"
    )
    for ddsup in installs:
        print(f"\n## {ddsup.name}")
        for key in runs[ddsup.name][0]:
            print(_row(key, [run[key] for run in runs[ddsup.name]]))
        print(_row("scancel → no process of the run left", cancels[ddsup.name]))
        for module in (
            "ddsup.agent._agent",
            "ddsup.controller._controller",
            "ddsup.ops._status_command",
        ):
            wall, cpu = _import_time(ddsup, module)
            print(f"{'python -c import ' + module + ' (wall, CPU)':<52} {wall:7.2f} s  {cpu:.2f} s")
    print()
    for name, value in floor.items():
        print(f"{name:<52} {value:7.2f} s  (median of 3)")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
