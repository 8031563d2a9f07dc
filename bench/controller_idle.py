"""The controller's CPU while idle, by the number of agents (issue 19's idle goal).

``ddsup start --nodes N --gpus-per-node 1`` of one ``busybox httpd`` lane per node and
the built-in endpoint (``scale_allocation.py``'s units): N real agents, each a process
with its own TCP connection to the controller, but only N lanes, so that 128 agents fit
on a small shared machine. Once every lane is ready and the run has settled, the
controller's CPU is read over ``--windows`` windows of ``--window`` seconds each, from
``/proc/<pid>/task/*/schedstat`` (nanoseconds of CPU, so a window of a fraction of a
percent is resolved; the 10 ms ticks of ``/proc/<pid>/stat`` are printed too). The
agents' CPU over the same windows is printed beside it (they share the heartbeats).

``--baseline REV`` runs ddsup as of that git revision too, alternating with the checkout
(or with ``--code REV``, a revision rather than the working tree) for each agent count, so both columns come from one run on the same machine. The load
average at the start and end of each run is printed with it: the machine is shared.

``--profile DIR`` runs each controller under cProfile, enabled only for the first idle
window (SIGRTMIN+3 starts it, a second one writes ``DIR/<name>.prof``): the profile of
the idle controller, not of its start-up, timed in CPU time (on a loaded machine wall
time would charge a system call with the wait for a CPU). Its CPU figures are then not
the product's.

    .venv/bin/python bench/controller_idle.py [--agents 32,128] [--windows 3] \
        [--window 30] [--baseline main] [--agent-timeout 30s] [--profile DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil
from bench_marks import kill_marked, marked_process
from scale_allocation import (
    DDSUP,
    ROOT,
    EventTail,
    Run,
    baseline_code,
    busybox,
    compile_bytecode,
    cool_down,
    log,
    wait_for,
)

TICK = os.sysconf("SC_CLK_TCK")
SETTLE = 5.0  # seconds after the last ready before the first window: the start's tail
# The controller under cProfile, switched on and off by a signal it does not otherwise
# handle (``--profile``; SIGUSR1/2 are forwarded to units): ddsup ends with
# ``os._exit``, so a profile of the whole process would never be written.
PROFILE_SIGNAL = signal.SIGRTMIN + 3
PROFILED = """\
import cProfile, signal, sys, time
profile, state, out = cProfile.Profile(time.process_time), {"on": False}, sys.argv.pop(1)
def toggle(signum, frame):
    if state["on"]:
        profile.disable()
        profile.dump_stats(out)
    else:
        profile.enable()
    state["on"] = not state["on"]
signal.signal(signal.SIGRTMIN + 3, toggle)
from ddsup._cli import main
raise SystemExit(main())
"""


def cpu_ns(pid: int) -> dict[str, int]:
    """CPU time of each thread of ``pid`` so far, in nanoseconds (``schedstat``)."""
    times = {}
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as file:
                times[task] = int(file.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that just ended
    return times


def cpu_delta_s(before: dict[str, int], after: dict[str, int]) -> float:
    """Seconds of CPU between two :func:`cpu_ns` readings: threads that ended in between
    count for nothing (an underestimate; the ticks, which keep them, are printed too)."""
    return sum(ns - before.get(task, 0) for task, ns in after.items()) / 1e9


def ticks(pid: int) -> int:
    """utime + stime of ``pid`` in clock ticks (``/proc/<pid>/stat``)."""
    with open(f"/proc/{pid}/stat") as file:
        fields = file.read().rpartition(")")[2].split()
    return int(fields[11]) + int(fields[12])


def agents_cpu(controller: int) -> float:
    total = 0.0
    for proc in psutil.Process(controller).children():
        try:
            if "agent" in proc.cmdline()[:4]:
                times = proc.cpu_times()
                total += times.user + times.system
        except psutil.Error:
            continue
    return total


def argv(run: Run, units: Path, timeout: str, profile: Path | None) -> list[str]:
    ddsup = DDSUP if profile is None else [sys.executable, "-c", PROFILED, str(profile)]
    start = ["start", str(units), "--state-dir", str(run.state), "-q"]
    nodes = ["--nodes", str(run.nodes), "--gpus-per-node", "1", "--agent-timeout", timeout]
    return [*ddsup, *start, *nodes]


def one_run(run: Run, args: argparse.Namespace, name: str) -> dict[str, list[float]]:
    """Start, wait until every lane is ready, measure the idle windows, stop."""
    units = run.write_units(busybox())
    tail = EventTail(run.state / "events.jsonl")
    profile = None if args.profile is None else args.profile / f"{name}.prof"
    out: dict[str, list[float]] = {"pct": [], "tick_pct": [], "agents_pct": []}
    with marked_process(
        argv(run, units, args.agent_timeout, profile),
        run.work / "output",
        stop_timeout=120,
        env=run.env,
    ) as process:
        wanted = run.lanes + 1  # and the endpoint
        wait_for(lambda: len(tail.transitions("ready")) >= wanted, run.limit, "ready", process)
        time.sleep(SETTLE)  # the start's tail, not a synchronisation: nothing to await
        pid = process.pid
        for index in range(args.windows):
            if profile is not None and index == 0:
                os.kill(pid, PROFILE_SIGNAL)
            ns, tk, ag, began = cpu_ns(pid), ticks(pid), agents_cpu(pid), time.monotonic()
            time.sleep(args.window)  # the measurement window itself
            span = time.monotonic() - began
            out["pct"].append(100 * cpu_delta_s(ns, cpu_ns(pid)) / span)
            out["tick_pct"].append(100 * (ticks(pid) - tk) / TICK / span)
            out["agents_pct"].append(100 * (agents_cpu(pid) - ag) / span)
            if profile is not None and index == 0:
                os.kill(pid, PROFILE_SIGNAL)
            log(f"{name}: window {index + 1}: controller {out['pct'][-1]:.3f} % of a core")
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=120)
    tail.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--agents", default="32,128", help="agent counts, comma-separated")
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--window", type=float, default=30.0, help="seconds per window")
    parser.add_argument("--agent-timeout", default="30s", help="ddsup start's --agent-timeout")
    parser.add_argument("--baseline", metavar="REV", help="also run ddsup as of this revision")
    parser.add_argument(
        "--code", metavar="REV", help="measure this revision instead of the working tree"
    )
    parser.add_argument("--cool", type=float, default=60.0, help="most seconds between runs")
    parser.add_argument("--profile", type=Path, help="cProfile each idle controller, to here")
    args = parser.parse_args()
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="ddsup-controller-idle-"))
    codes: list[tuple[str, Path | None]] = [("checkout", None)]
    if args.code:  # a fixed revision: edits to the tree while it runs do not leak in
        codes = [(args.code, baseline_code(args.code, work / "code"))]
    if args.baseline:
        codes.insert(0, (args.baseline, baseline_code(args.baseline, work / "baseline")))
    compile_bytecode(code or ROOT / "supervisor" for _name, code in codes)
    rows: list[tuple[int, str, dict[str, list[float]], tuple[float, float]]] = []
    try:
        for agents in (int(n) for n in args.agents.split(",")):
            for code_name, code in codes:
                if rows:
                    cool_down(args.cool)
                load = os.getloadavg()[0]
                log(f"{code_name}: {agents} agents")
                run = Run(work / f"run{len(rows)}", agents, 1, "0s", 300.0, "auto", code)
                name = f"{code_name.replace('/', '_')}-{agents}"
                rows.append((agents, code_name, one_run(run, args, name), (load, 0.0)))
                rows[-1] = (*rows[-1][:3], (load, os.getloadavg()[0]))
    finally:
        left = kill_marked()
        if left:
            print(f"LEFTOVER: {left} processes", file=sys.stderr)
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n{args.windows} windows of {args.window:g} s, --agent-timeout {args.agent_timeout}")
    print(
        f"{'agents':>6} {'code':<12} {'load start/end':>15} {'controller % (median; windows)':<44}"
    )
    for agents, code_name, out, (begin, end) in rows:
        windows = ", ".join(f"{p:.3f}" for p in out["pct"])
        print(
            f"{agents:>6} {code_name:<12} {begin:>7.1f} /{end:>5.1f}  "
            f"{statistics.median(out['pct']):.3f} ({windows})"
            f"  ticks {statistics.median(out['tick_pct']):.2f}"
            f"  agents {statistics.median(out['agents_pct']):.2f}"
        )


if __name__ == "__main__":
    main()
