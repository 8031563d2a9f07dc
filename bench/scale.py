"""ddsup at scale: planning a large allocation, many local services, many simulated lanes.

Three measurements, each bounded in time and ending every process it started:

- **plan**: ``ddsup plan DIR --nodelist 'gpu[001-128]' --gpus-per-node 8`` for one lane
  unit with ``replicas = "auto"`` (1,024 one-GPU lanes on 128 nodes), end to end as a
  subprocess (table and ``--json``), median of ``--runs``; next to it the floor of any
  ``ddsup`` command (``python -c 'import ddsup._cli'``). ``bench/plan_scale.py`` times
  ``make_plan`` alone;
- **services**: ``ddsup start`` of ``--services`` local ``sleep`` services: seconds
  from the spawn of ``ddsup start`` to its ``run starting`` event (Python start-up) and
  to the last ``ready`` event, ddsup's own CPU seconds (psutil: ``ddsup start``, agents,
  sentinel; not the units) until then, SIGTERM → exit, and the CPU seconds of the whole
  tree from spawn to exit (``getrusage(RUSAGE_CHILDREN)``, units included);
- **lanes**: ``ddsup start --nodes N --gpus-per-node 8`` of a lane unit running
  ``ddsup fake-vllm`` (``stagger = "0s"``, HTTP readiness every 200 ms), N = 16 or fewer
  when available memory would not hold the lanes (``--lane-mib`` each, at most 60 % of
  what is available): time to the last lane ready, RSS and PSS of the lanes and of
  ddsup's own processes, ddsup's CPU seconds, and the stop.

Every process started carries ``DDSUP_BENCH_MARK``; whatever carries it afterwards is
SIGKILLed and reported as a leftover.

    .venv/bin/python bench/scale.py [--only plan,services,lanes] [--services 256] \
        [--nodes 16] [--limit 600] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from bench_marks import kill_marked, marked_process, marked_processes

PLAN_NODES, PLAN_GPUS = 128, 8
GOAL_PLAN_S = 1.0
LANE_UNIT = """\
[unit]
type = "lane"
[service]
exec = {exec}
timeout_start = "{limit}s"
timeout_stop = "10s"
[ready]
http = "http://{{host}}:{{port}}/health"
interval = "200ms"
[lane]
model = "fake"
gpus = 1
replicas = "auto"
port = "auto"
stagger = "0s"
"""


# --- helpers -------------------------------------------------------------------------
def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')} load {os.getloadavg()[0]:.2f}] {message}", flush=True)


def median_of(runs: int, func: Callable[[], object]) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        func()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def is_unit(proc: psutil.Process) -> bool:
    """A supervised unit (``sleep`` or fake-vllm), as opposed to ddsup's own processes."""
    with suppress(psutil.Error):
        return proc.name() == "sleep" or "fake-vllm" in proc.cmdline()
    return False


def tree(pid: int) -> tuple[list[psutil.Process], list[psutil.Process]]:
    """(ddsup's own processes, the units) under ``pid``, plus ddsup's sentinel."""
    root = psutil.Process(pid)
    own: list[psutil.Process] = [root]
    units: list[psutil.Process] = []
    for proc in root.children(recursive=True):
        (units if is_unit(proc) else own).append(proc)
    for proc in marked_processes():  # the sentinel runs in its own session, not below
        with suppress(psutil.Error):
            if "_sentinel" in " ".join(proc.cmdline()) and proc not in own:
                own.append(proc)
    return own, units


def cpu_seconds(processes: list[psutil.Process]) -> float:
    total = 0.0
    for proc in processes:
        with suppress(psutil.Error):
            times = proc.cpu_times()
            total += times.user + times.system
    return total


def memory_mib(processes: list[psutil.Process]) -> tuple[float, float]:
    """(RSS, PSS) summed, MiB: RSS counts shared pages once per process, PSS splits them."""
    rss = pss = 0
    for proc in processes:
        with suppress(psutil.Error):
            info = proc.memory_full_info()
            rss += info.rss
            pss += info.pss
    return rss / 2**20, pss / 2**20


class Events:
    """Reads ``events.jsonl`` incrementally: only lines appended since the last call."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.lines: list[dict[str, Any]] = []

    def update(self) -> list[dict[str, Any]]:
        with suppress(FileNotFoundError), self.path.open("rb") as file:
            file.seek(self.offset)
            data = file.read()
            complete = data[: data.rfind(b"\n") + 1]
            self.offset += len(complete)
            self.lines += [json.loads(line) for line in complete.splitlines()]
        return self.lines

    def ready_times(self) -> list[float]:
        return [float(e["time"]) for e in self.update() if e.get("to") == "ready"]

    def run_start(self) -> float:
        return float(next(e["time"] for e in self.update() if e.get("event") == "run"))


def wait_ready(events: Events, process: subprocess.Popen[bytes], count: int, limit: float) -> int:
    """Bounded poll of the event log until ``count`` instances were ready; how many were."""
    deadline = time.monotonic() + limit
    while len(events.ready_times()) < count:
        if process.poll() is not None:
            raise SystemExit(f"bench: ddsup start exited with {process.returncode} early")
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    return len(events.ready_times())


def stop_timed(process: subprocess.Popen[bytes]) -> float:
    start = time.monotonic()
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=120)
    return time.monotonic() - start


# --- plan ----------------------------------------------------------------------------
def bench_plan(work: Path, runs: int) -> dict[str, float]:
    units = work / "plan-units"
    units.mkdir()
    lane = LANE_UNIT.format(exec='["vllm", "serve", "--port", "{port}"]', limit=60)
    (units / "lane@.toml").write_text(lane)
    ddsup = [sys.executable, "-m", "ddsup", "plan", str(units), "--nodelist"]
    ddsup += [f"gpu[001-{PLAN_NODES:03d}]", "--gpus-per-node", str(PLAN_GPUS)]
    lanes = len(
        json.loads(subprocess.run([*ddsup, "--json"], capture_output=True).stdout)["instances"]
    )

    def run(argv: list[str]) -> Callable[[], object]:
        return lambda: subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)

    result = {
        "lanes": float(lanes),
        "cli_table_s": median_of(runs, run(ddsup)),
        "cli_json_s": median_of(runs, run([*ddsup, "--json"])),
        "import_floor_s": median_of(runs, run([sys.executable, "-c", "import ddsup._cli"])),
    }
    log(f"plan: {result}")
    return result


# --- services --------------------------------------------------------------------------
def bench_services(work: Path, count: int, limit: float) -> dict[str, float]:
    units = work / "svc-units"
    units.mkdir()
    text = '[unit]\ntype = "service"\n[service]\nexec = ["sleep", "3600"]\n'
    for i in range(count):
        (units / f"s{i:03d}.toml").write_text(text)
    state = work / "svc-state"
    argv = [sys.executable, "-m", "ddsup", "start", str(units), "--state-dir", str(state), "-q"]
    events = Events(state / "events.jsonl")
    cpu_before, spawned = children_cpu(), time.time()
    with marked_process(argv, work / "svc-output", stop_timeout=60) as process:
        ready = wait_ready(events, process, count, limit)
        own, units_running = tree(process.pid)
        result = {
            "services": float(count),
            "ready": float(ready),
            "to_run_starting_s": events.run_start() - spawned,
            "to_all_ready_s": max(events.ready_times()) - spawned,
            "ddsup_cpu_to_ready_s": cpu_seconds(own),
            "ddsup_rss_mib": memory_mib(own)[0],
            "units_running": float(len(units_running)),
        }
        result["stop_s"] = stop_timed(process)
        result["exit_status"] = float(process.returncode)
    result["tree_cpu_total_s"] = children_cpu() - cpu_before
    log(f"services: {result}")
    return result


# --- lanes ---------------------------------------------------------------------------
def lane_nodes(wanted: int, gpus: int, lane_mib: float) -> int:
    available = psutil.virtual_memory().available / 2**20
    fits = int(0.6 * available / (lane_mib * gpus))
    if fits < wanted:
        log(f"lanes: {available:.0f} MiB available holds {fits} nodes of {gpus} lanes")
    return max(1, min(wanted, fits))


def bench_lanes(work: Path, args: argparse.Namespace) -> dict[str, float]:
    nodes = lane_nodes(args.nodes, args.gpus_per_node, args.lane_mib)
    lanes = nodes * args.gpus_per_node
    units = work / "lane-units"
    units.mkdir()
    argv_lane = [sys.executable, "-m", "ddsup", "fake-vllm", "--port", "{port}"]
    argv_lane += ["--model", "{model}"]
    (units / "lane@.toml").write_text(
        LANE_UNIT.format(exec=json.dumps(argv_lane), limit=int(args.limit))
    )
    state = work / "lane-state"
    argv = [sys.executable, "-m", "ddsup", "start", str(units), "--state-dir", str(state), "-q"]
    argv += ["--nodes", str(nodes), "--gpus-per-node", str(args.gpus_per_node)]
    events = Events(state / "events.jsonl")
    cpu_before, spawned = children_cpu(), time.time()
    with marked_process(argv, work / "lane-output", stop_timeout=60) as process:
        ready = wait_ready(events, process, lanes, args.limit)
        own, lane_procs = tree(process.pid)
        result = {
            "nodes": float(nodes),
            "lanes": float(lanes),
            "ready": float(ready),
            "to_all_ready_s": max(events.ready_times(), default=float("nan")) - spawned,
            "ddsup_cpu_to_ready_s": cpu_seconds(own),
            "lanes_cpu_to_ready_s": cpu_seconds(lane_procs),
            "lane_processes": float(len(lane_procs)),
            "ddsup_processes": float(len(own)),
        }
        result["lanes_rss_mib"], result["lanes_pss_mib"] = memory_mib(lane_procs)
        result["ddsup_rss_mib"], result["ddsup_pss_mib"] = memory_mib(own)
        result["lanes_alive_after_memory"] = float(sum(p.is_running() for p in lane_procs))
        result["stop_s"] = stop_timed(process)
        result["exit_status"] = float(process.returncode)
    result["tree_cpu_total_s"] = children_cpu() - cpu_before
    log(f"lanes: {result}")
    return result


# --- main ----------------------------------------------------------------------------
@dataclass
class Report:
    load: dict[str, float] = field(default_factory=dict)
    results: dict[str, dict[str, float]] = field(default_factory=dict)

    def add(self, name: str, values: dict[str, float]) -> None:
        self.results[name] = values
        self.load[name] = os.getloadavg()[0]


def print_report(report: Report) -> None:
    print(f"\nmachine: {os.cpu_count()} CPUs, "
          f"{psutil.virtual_memory().total / 2**30:.1f} GiB")  # fmt: skip
    for name, values in report.results.items():
        print(f"\n## {name} (load average at the end: {report.load[name]:.2f})")
        for key, value in values.items():
            print(f"  {key:<24} {value:10.3f}")
    plan = report.results.get("plan")
    if plan:
        verdict = "met" if plan["cli_table_s"] <= GOAL_PLAN_S else "MISSED"
        print(f"\nplan of {plan['lanes']:.0f} lanes end to end ≤ {GOAL_PLAN_S:g} s: {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--only", type=lambda s: set(s.split(",")), default={"plan", "services", "lanes"}
    )
    parser.add_argument("--runs", type=int, default=5, help="plan: runs per median")
    parser.add_argument("--services", type=int, default=256)
    parser.add_argument("--nodes", type=int, default=16, help="lanes: simulated nodes")
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--lane-mib", type=float, default=60.0, help="lanes: RSS per lane")
    parser.add_argument("--limit", type=float, default=600.0, help="seconds to all ready")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--keep", action="store_true", help="keep the state directories")
    args = parser.parse_args()
    report = Report()
    work = Path(tempfile.mkdtemp(prefix="ddsup-scale-"))
    try:
        if "plan" in args.only:
            report.add("plan", bench_plan(work, args.runs))
        if "services" in args.only:
            report.add("services", bench_services(work, args.services, args.limit))
        if "lanes" in args.only:
            report.add("lanes", bench_lanes(work, args))
    finally:
        kill_marked()
        if args.keep:
            print(f"state directories kept under {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print_report(report)
    if args.json:
        args.json.write_text(json.dumps({"load": report.load, **report.results}, indent=1))


if __name__ == "__main__":
    main()
