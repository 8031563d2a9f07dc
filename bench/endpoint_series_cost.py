"""Measure what the endpoint's time series costs: the endpoint with it on, and off.

Two ``ddsup endpoint`` processes pinned to the same core, in front of the same minimal
upstream lanes (``endpoint_servers.py``'s), one with ``DDSUP_STATE_DIR`` set (the series
is recorded: hooks on every request, a line a second written by a thread) and one
without (the hooks are no-ops). Two wrk processes drive both at the same time, so
both see the same machine (a shared machine's load changes from second to second):
each repetition gives each endpoint's CPU time per request (user + system, psutil) in
the same window, and the script prints the medians and the median of the per-window
differences, for plain JSON and for SSE streams. It also times the hooks themselves
in-process (one request = started + sent + finished), and checks that the series
counted every request wrk made.

    python bench/endpoint_series_cost.py [--seconds 4] [--reps 9] [--lanes 4]

Needs ``wrk`` (Debian: ``apt-get install -y wrk``). Run from the repository root.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import timeit
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
from endpoint_servers import cpu_time, server_argv, start, stop_all, wait_port, wrk

from ddsup.endpoint._timeseries import NO_SERIES, SeriesRecorder
from ddsup.record import read_series
from ddsup.record._series import STARTED

PLAIN = '{"model":"m","prompt":"hi","max_tokens":16}'
STREAM = '{"model":"m","prompt":"hi","stream":true}'


def hooks_ns() -> tuple[float, float]:
    """Nanoseconds per request of the hooks alone: recorder, and the no-op stand-in."""
    recorder = SeriesRecorder(Path("/nonexistent"))
    results = []
    for hooks in (recorder, NO_SERIES):

        def one_request(hooks: object = hooks) -> None:
            hooks.started("llama@3")  # type: ignore[attr-defined]
            hooks.sent("llama@3", 512)  # type: ignore[attr-defined]
            hooks.finished("llama@3", 200)  # type: ignore[attr-defined]

        runs = timeit.repeat(one_request, number=200_000, repeat=5)
        results.append(min(runs) / 200_000 * 1e9)
    return results[0], results[1]


def measure(args: argparse.Namespace) -> dict[str, list[float]]:
    cpus = sorted(os.sched_getaffinity(0))
    endpoint_cpu, others = {cpus[0]}, set(cpus[1:]) or {cpus[0]}
    tmp = Path(tempfile.mkdtemp(prefix="ddsup-series-bench-"))
    state = tmp / "state"
    state.mkdir(mode=0o700)
    children: list[subprocess.Popen[str]] = []
    base_env = {k: v for k, v in os.environ.items() if k != "DDSUP_STATE_DIR"}
    try:
        for i in range(args.lanes):
            up = server_argv("upstream", tmp / f"up{i}", "--events", str(args.events))
            up += ["--gap", str(args.gap)]
            children.append(start(up, others, base_env))
        lanes = [f"http://127.0.0.1:{wait_port(tmp / f'up{i}')}" for i in range(args.lanes)]
        argv = [sys.executable, "-m", "ddsup", "endpoint", "--port", "0"]
        argv += [a for lane in lanes for a in ("--lane", f"m={lane}")]
        urls, procs = {}, {}
        for name, env in (("off", base_env), ("on", {**base_env, "DDSUP_STATE_DIR": str(state)})):
            children.append(proc := start(argv, endpoint_cpu, env))
            assert proc.stdout is not None
            urls[name] = proc.stdout.readline().split()[-1] + "/v1/completions"
            procs[name] = psutil.Process(proc.pid)
        cpu: dict[str, list[float]] = {}
        sent = 0  # requests wrk completed through the recording endpoint
        with ThreadPoolExecutor(2) as pool:  # the two wrk processes run side by side
            for kind, body in (("JSON", PLAIN), ("SSE", STREAM)):
                for rep in range(args.reps + 1):  # the first is a warm-up
                    before = {n: cpu_time((procs[n],)) for n in ("off", "on")}
                    runs = {
                        n: pool.submit(wrk, urls[n], body, args.seconds, args.connections, others)
                        for n in ("off", "on")
                    }
                    done = {n: run.result() for n, run in runs.items()}
                    sent += done["on"].requests
                    if rep == 0:
                        continue
                    for n, run in done.items():
                        used = cpu_time((procs[n],)) - before[n]
                        cpu.setdefault(f"{n} {kind}", []).append(used / run.requests * 1e6)
                        cpu.setdefault(f"{n} {kind} rps", []).append(run.requests / run.seconds)
        stop_all(children)  # the recording endpoint writes its last line as it stops
        series = read_series(state)
        counted = sum(line.total(STARTED) for line in series.lines)
        size = sum(p.stat().st_size for p in (state / "series").iterdir())
        cpu["counted"] = [counted]
        cpu["sent"] = [sent]
        cpu["series bytes"] = [size]
        cpu["series lines"] = [len(series.lines)]
        return cpu
    finally:
        stop_all(children)
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=int, default=4, help="seconds per window")
    parser.add_argument("--reps", type=int, default=9, help="windows (medians reported)")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--lanes", type=int, default=4, help="upstream lanes")
    parser.add_argument("--events", type=int, default=50, help="SSE events per request")
    parser.add_argument("--gap", type=float, default=0.001, help="seconds between SSE events")
    args = parser.parse_args()
    if not shutil.which("wrk"):
        raise SystemExit("wrk is needed: apt-get install -y wrk")
    on_ns, off_ns = hooks_ns()
    print(
        f"hooks per request (started + sent + finished), in-process: recorder {on_ns:.0f} ns, "
        f"no-op {off_ns:.0f} ns"
    )
    results = measure(args)
    print(
        f"both endpoints on one core, two wrk -c {args.connections} at once on the other, "
        f"{args.lanes} lanes, {args.reps} windows of {args.seconds} s; CPU µs per request"
    )
    for kind in ("JSON", "SSE"):
        offs, ons = results[f"off {kind}"], results[f"on {kind}"]
        off, on = statistics.median(offs), statistics.median(ons)
        rps_off, rps_on = (statistics.median(results[f"{n} {kind} rps"]) for n in ("off", "on"))
        paired = statistics.median((b - a) / a for a, b in zip(offs, ons, strict=True))
        print(
            f"  {kind:<5} series off {off:7.1f} µs ({rps_off:6.0f} req/s)   "
            f"on {on:7.1f} µs ({rps_on:6.0f} req/s)   median of the paired differences "
            f"{paired:+.1%} of the endpoint's CPU (goal < 2 %)"
        )
        print(
            f"        windows off: {', '.join(f'{v:.1f}' for v in offs)}; "
            f"on: {', '.join(f'{v:.1f}' for v in ons)}"
        )
    lines, size = int(results["series lines"][0]), results["series bytes"][0] / 1e3
    counted, sent = int(results["counted"][0]), int(results["sent"][0])
    print(
        f"series: {lines} lines, {size:.0f} kB; it counted {counted:,} requests started, wrk "
        f"completed {sent:,} (the difference: requests in flight when a wrk run ended)"
    )
    print(f"load average at the end: {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
