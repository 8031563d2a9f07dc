"""``ddsup status`` of a live run at allocation scale, side by side with another revision.

Issue 19's goal is ``ddsup status`` ≤ 0.5 s at 128 nodes × 8 lanes. This bench starts
one live run per code (``--baseline REV`` as of that git revision, and this checkout),
``ddsup start --nodes N --gpus-per-node G`` of ``busybox httpd`` lanes and the built-in
endpoint (the units of ``scale_allocation.py``), one after the other, waits until every
lane of both is ready, and then, with both runs alive (so both see the same machine),
runs for ``--reps`` rounds, alternating the codes (the order flips each round):

- ``ddsup status``, ``ddsup status --json`` and the floor ``ddsup --version``, each a
  new process of that code against its own run: wall time (spawn → exit, the output
  read through a pipe as a terminal or ``| less`` would) and the command's CPU time
  (user + system from ``os.wait4``), and the output's size;
- the controller's CPU over all rounds' status commands divided by their number
  (``psutil``, in clock ticks of 10 ms; it includes the run's own idle work, ~0 here, so
  it bounds what one reply costs it).

Medians over the rounds, the ratio checkout / baseline, and the load average. Both
trees are compiled to bytecode first, as ``pip install`` does.

    .venv/bin/python bench/status_scale.py --nodes 32 --gpus-per-node 8 --reps 7 \
        --baseline main [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
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
    log,
    wait_for,
)

COMMANDS = {
    "status": ["status"],
    "status --json": ["status", "--json"],
    "--version": ["--version"],
}


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (the child's own, from ``wait4``) and output bytes."""
    read, write = os.pipe()
    began = time.perf_counter()
    pid = os.posix_spawn(
        argv[0],
        argv,
        env,
        file_actions=[(os.POSIX_SPAWN_DUP2, write, 1), (os.POSIX_SPAWN_CLOSE, read)],
    )
    os.close(write)
    size = 0
    with os.fdopen(read, "rb") as output:
        while chunk := output.read(1 << 16):
            size += len(chunk)
    _pid, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - began
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"bench: {argv[3:]} failed with {os.waitstatus_to_exitcode(status)}")
    return wall, usage.ru_utime + usage.ru_stime, size


def start_run(stack: ExitStack, run: Run) -> subprocess.Popen[bytes]:
    """``ddsup start`` of ``run``, alive until ``stack`` closes; returns once all is ready."""
    units = run.write_units(busybox())
    tail = EventTail(run.state / "events.jsonl")
    stack.callback(tail.close)
    began = time.monotonic()
    process = stack.enter_context(
        marked_process(run.argv(units, None), run.work / "output", stop_timeout=120, env=run.env)
    )
    wait_for(
        lambda: len(tail.transitions("ready")) >= run.lanes + 1,
        run.limit,
        f"{run.lanes} lanes and the endpoint ready",
        process,
    )
    log(f"all {run.lanes} lanes ready after {time.monotonic() - began:.1f} s")
    return process


def stop_all(processes: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM to every run at once, then wait for each: a run that ends on its own leaves
    nothing for ``marked_process``'s sweep, which would SIGKILL the other run as well."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        process.wait(timeout=120)


def measure(
    runs: dict[str, tuple[Run, psutil.Process]], reps: int
) -> dict[str, dict[str, list[float]]]:
    """Per code, per figure: one value per round."""
    out: dict[str, dict[str, list[float]]] = {name: {} for name in runs}
    spent = dict.fromkeys(runs, 0.0)  # the controllers' CPU over all rounds (10 ms ticks)
    names = list(runs)
    for rep in range(reps):
        for name in names if rep % 2 == 0 else names[::-1]:
            run, controller = runs[name]
            env = {**os.environ, **run.env}
            cpu = controller.cpu_times()
            for label, args in COMMANDS.items():
                argv = [*DDSUP, *args]
                if label != "--version":
                    argv += ["--state-dir", str(run.state)]
                wall, used, size = timed(argv, env)
                figures = out[name]
                figures.setdefault(f"{label}: wall (s)", []).append(wall)
                figures.setdefault(f"{label}: CPU (s)", []).append(used)
                figures.setdefault(f"{label}: bytes", []).append(size)
            after = controller.cpu_times()
            spent[name] += after.user + after.system - cpu.user - cpu.system
        log(f"round {rep + 1} of {reps}")
    for name, seconds in spent.items():  # two requests a round: a mean, not a median
        out[name]["controller CPU per status, mean (ms)"] = [1000 * seconds / (2 * reps)]
    return out


def report(results: dict[str, dict[str, list[float]]], loads: tuple[float, float]) -> None:
    names = list(results)
    print(f"\nmachine: {os.cpu_count()} CPUs; load average {loads[0]:.1f} → {loads[1]:.1f}")
    head = f"{'median of rounds':<36}" + "".join(f"{n:>14}" for n in names)
    print(head + ("   ratio" if len(names) == 2 else ""))
    for key in results[names[-1]]:
        values = [statistics.median(results[n][key]) for n in names]
        cells = "".join(f"{v:>14.3f}" for v in values)
        ratio = f"{values[1] / values[0]:>8.2f}" if len(names) == 2 and values[0] else ""
        print(f"{key:<36}{cells}{ratio}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, default=32)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--reps", type=int, default=7, help="rounds (median over them)")
    parser.add_argument("--baseline", metavar="REV", help="also run ddsup as of this revision")
    parser.add_argument("--limit", type=float, default=600.0, help="seconds to all ready")
    parser.add_argument("--json", type=Path, help="also write every value here")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ddsup-status-scale-"))
    # a copy of the checkout: editing it while the bench runs changes nothing here
    checkout = Path(shutil.copytree(ROOT / "supervisor", work / "checkout" / "supervisor"))
    codes: list[tuple[str, Path]] = [("checkout", checkout)]
    if args.baseline:
        codes.insert(0, (args.baseline, baseline_code(args.baseline, work / "baseline")))
    compile_bytecode(code for _name, code in codes)
    try:
        with ExitStack() as stack:
            runs = {}
            started: list[subprocess.Popen[bytes]] = []
            for index, (name, code) in enumerate(codes):
                log(f"{name}: {args.nodes} nodes × {args.gpus_per_node} lanes")
                run = Run(
                    work / f"run{index}",
                    args.nodes,
                    args.gpus_per_node,
                    "0s",
                    args.limit,
                    "auto",
                    code,
                )
                started.append(start_run(stack, run))
                stack.callback(stop_all, list(started))  # the first of the stack's exits
                runs[name] = (run, psutil.Process(started[-1].pid))
            time.sleep(5.0)  # settle: the endpoints' start, the last events (not a sync)
            load = os.getloadavg()[0]
            results = measure(runs, args.reps)
            loads = (load, os.getloadavg()[0])
    finally:
        left = kill_marked()
        if left:
            print(f"LEFTOVER: {left} processes", file=sys.stderr)
        shutil.rmtree(work, ignore_errors=True)
    report(results, loads)
    if args.json:
        args.json.write_text(json.dumps({"loads": loads, "results": results}, indent=1))


if __name__ == "__main__":
    main()
