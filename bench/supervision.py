"""What supervision costs: ddsup's local engine next to supervisord 4.3.0.

Side by side, alternating, ``--reps`` times, medians and the ratio:

- restart gap: a POSIX-sh unit appends ``date +%s%N`` to a file and exits 1, restarted
  at once (ddsup: ``restart = "always"``, ``restart_sec = "0s"``; supervisord:
  ``autorestart=true``, ``startsecs=0``); the gap is the time between consecutive
  timestamps (start to start, so it includes the unit's own fork/exec of ``date``);
- idle CPU: CPU time (user + system, psutil) of the supervisor's own processes (ddsup:
  ``ddsup start``, its agents and its sentinel; supervisord: itself) over a window while
  ``--services`` units sleep, as % of one core;
- RSS of those processes during that window;
- stop: SIGTERM to the supervisor → its exit, with all services running.

supervisord is installed into its own venv under ``--cache`` (``python -m venv``,
``pip install supervisor==4.3.0``) when not there yet.

    .venv/bin/python bench/supervision.py [--reps 3] [--services 32] [--idle-seconds 10]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import psutil

SUPERVISOR_VERSION = "4.3.0"
GOALS = {"gap_ms": 25.0, "idle_cpu_pct": 1.0, "stop_s": 1.5}
CRASH_SH = 'date +%s%N >> "$0"; exit 1'


@dataclass
class Sample:
    gaps_ms: list[float] = field(default_factory=list)
    idle_cpu_pct: list[float] = field(default_factory=list)
    rss_mib: list[float] = field(default_factory=list)
    stop_s: list[float] = field(default_factory=list)


# --- helpers -------------------------------------------------------------------------
def wait_until(check: Callable[[], bool], limit: float, what: str) -> None:
    """Bounded poll for an external condition (a file or another process's state)."""
    deadline = time.monotonic() + limit
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"bench: timed out waiting for {what}")
        time.sleep(0.01)


def timestamps(path: Path) -> list[int]:
    if not path.exists():
        return []
    return [int(x) for x in path.read_text().split()]


def gaps_ms(stamps: list[int]) -> list[float]:
    return [(b - a) / 1e6 for a, b in itertools.pairwise(stamps)]


def own_processes(root: psutil.Process, unit_names: tuple[str, ...]) -> list[psutil.Process]:
    """The supervisor and its helper processes, not the units it supervises."""
    found = [root]
    for child in root.children(recursive=True):
        try:
            if child.name() not in unit_names:
                found.append(child)
        except psutil.NoSuchProcess:
            pass
    return found


def cpu_seconds(processes: list[psutil.Process]) -> float:
    total = 0.0
    for proc in processes:
        try:
            times = proc.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return total


def rss_mib(processes: list[psutil.Process]) -> float:
    total = 0
    for proc in processes:
        with suppress(psutil.NoSuchProcess):
            total += proc.memory_info().rss
    return total / 2**20


def stop(process: subprocess.Popen[bytes], limit: float = 60.0) -> float:
    """SIGTERM, then the seconds until the process exited."""
    start = time.monotonic()
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise SystemExit("bench: supervisor did not stop within {limit}s") from None
    return time.monotonic() - start


@contextmanager
def started(argv: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as output:
        process = subprocess.Popen(argv, stdout=output, stderr=output, stdin=subprocess.DEVNULL)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


# --- ddsup ---------------------------------------------------------------------------
class Ddsup:
    name = "ddsup"

    def __init__(self, work: Path) -> None:
        self.work = work

    def _start(self, units: dict[str, str], tag: str) -> tuple[list[str], Path]:
        directory = self.work / f"ddsup-{tag}"
        shutil.rmtree(directory, ignore_errors=True)
        (directory / "units").mkdir(parents=True)
        for name, text in units.items():
            (directory / "units" / f"{name}.toml").write_text(text)
        state = directory / "state"
        argv = [sys.executable, "-m", "ddsup", "start", str(directory / "units")]
        return [*argv, "--state-dir", str(state), "-q"], state

    def restart_gaps(self, count: int, tag: str) -> list[float]:
        stamps_file = self.work / f"ddsup-stamps-{tag}"
        stamps_file.unlink(missing_ok=True)
        unit = textwrap.dedent(f"""\
            [unit]
            type = "service"
            [service]
            exec = ["sh", "-c", {json.dumps(CRASH_SH)}, {json.dumps(str(stamps_file))}]
            restart = "always"
            restart_sec = "0s"
            start_limit_burst = 100000
            start_limit_interval = "1s"
            """)
        argv, state = self._start({"crash": unit}, tag)
        with started(argv, state.parent / "output") as process:
            wait_until(lambda: len(timestamps(stamps_file)) > count, 60, "ddsup restarts")
            stop(process)
        return gaps_ms(timestamps(stamps_file)[: count + 1])

    def idle(self, services: int, seconds: float, tag: str) -> tuple[float, float, float]:
        unit = '[unit]\ntype = "service"\n[service]\nexec = ["sleep", "3600"]\n'
        argv, state = self._start({f"s{i:02d}": unit for i in range(services)}, tag)
        with started(argv, state.parent / "output") as process:

            def all_ready() -> bool:
                path = state / "events.jsonl"
                if not path.exists():
                    return False
                lines = path.read_text().splitlines()
                return sum('"to": "ready"' in line for line in lines) >= services

            wait_until(all_ready, 60, "ddsup services ready")
            return measure_idle(process, seconds)


# --- supervisord ---------------------------------------------------------------------
class Supervisord:
    name = "supervisord"

    def __init__(self, work: Path, binary: Path) -> None:
        self.work = work
        self.binary = binary

    def _start(self, programs: str, tag: str) -> tuple[list[str], Path]:
        directory = self.work / f"supervisord-{tag}"
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        conf = directory / "supervisord.conf"
        conf.write_text(
            textwrap.dedent(f"""\
                [supervisord]
                nodaemon=true
                logfile={directory}/supervisord.log
                pidfile={directory}/supervisord.pid
                childlogdir={directory}
                loglevel=warn
                """)
            + programs
        )
        return [str(self.binary), "-c", str(conf)], directory

    def restart_gaps(self, count: int, tag: str) -> list[float]:
        stamps_file = self.work / f"supervisord-stamps-{tag}"
        stamps_file.unlink(missing_ok=True)
        command = f"/bin/sh -c '{CRASH_SH.replace('%', '%%')}' {stamps_file}"
        program = textwrap.dedent(f"""\
            [program:crash]
            command={command}
            autorestart=true
            startsecs=0
            startretries=100000
            """)
        argv, directory = self._start(program, tag)
        with started(argv, directory / "output") as process:
            wait_until(lambda: len(timestamps(stamps_file)) > count, 120, "supervisord restarts")
            stop(process)
        return gaps_ms(timestamps(stamps_file)[: count + 1])

    def idle(self, services: int, seconds: float, tag: str) -> tuple[float, float, float]:
        programs = "".join(
            f"[program:s{i:02d}]\ncommand=sleep 3600\nstartsecs=0\n" for i in range(services)
        )
        argv, directory = self._start(programs, tag)
        with started(argv, directory / "output") as process:
            root = psutil.Process(process.pid)

            def all_running() -> bool:
                sleeping = [c for c in root.children() if c.name() == "sleep"]
                return len(sleeping) >= services

            wait_until(all_running, 60, "supervisord programs running")
            return measure_idle(process, seconds)


def measure_idle(process: subprocess.Popen[bytes], seconds: float) -> tuple[float, float, float]:
    """(% of one core, RSS MiB, stop seconds) of the supervisor's own processes."""
    time.sleep(1.0)  # let start-up work settle before the window opens
    root = psutil.Process(process.pid)
    procs = own_processes(root, ("sleep",))
    before = cpu_seconds(procs)
    time.sleep(seconds)  # the measurement window itself
    used = cpu_seconds(procs) - before
    memory = rss_mib(procs)
    return 100.0 * used / seconds, memory, stop(process)


def supervisord_binary(cache: Path) -> Path:
    venv = cache / f"supervisor-{SUPERVISOR_VERSION}"
    binary = venv / "bin" / "supervisord"
    if binary.exists():
        return binary
    print(f"installing supervisor=={SUPERVISOR_VERSION} into {venv} …", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, f"supervisor=={SUPERVISOR_VERSION}"], check=True)
    return binary


# --- report --------------------------------------------------------------------------
def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def report(results: dict[str, Sample], args: argparse.Namespace) -> None:
    d, s = results["ddsup"], results["supervisord"]
    rows = [
        ("restart gap, median (ms)", median(d.gaps_ms), median(s.gaps_ms), GOALS["gap_ms"], "≤"),
        (
            f"idle CPU, {args.services} services (% core)",
            median(d.idle_cpu_pct),
            median(s.idle_cpu_pct),
            GOALS["idle_cpu_pct"],
            "≤",
        ),
        (
            f"RSS with {args.services} services (MiB)",
            median(d.rss_mib),
            median(s.rss_mib),
            None,
            "",
        ),
        (f"stop of {args.services} (s)", median(d.stop_s), median(s.stop_s), GOALS["stop_s"], "≤"),
    ]
    print(
        f"\n{args.reps} repetitions, alternating; {len(d.gaps_ms)} gaps per tool; "
        f"idle window {args.idle_seconds:g}s; load average {os.getloadavg()[0]:.1f} "
        f"on {os.cpu_count()} CPUs"
    )
    head = f"{'metric':<34} {'ddsup':>10} {'supervisord':>12} {'ratio':>8}  goal (ddsup)"
    print(head)
    print("-" * len(head))
    for label, mine, theirs, goal, op in rows:
        ratio = mine / theirs if theirs else float("nan")
        verdict = ""
        if goal is not None:
            verdict = f"{op} {goal:g}: {'met' if mine <= goal else 'MISSED'}"
        print(f"{label:<34} {mine:>10.3f} {theirs:>12.3f} {ratio:>8.3f}  {verdict}")
    tick = 100.0 / os.sysconf("SC_CLK_TCK") / args.idle_seconds
    print(f"(CPU time is counted in clock ticks: 0 means < {tick:.2f} % of a core)")
    gaps = sorted(d.gaps_ms)
    if gaps:
        print(
            f"\nddsup gaps (ms): min {gaps[0]:.1f}, p90 {gaps[int(0.9 * (len(gaps) - 1))]:.1f}, "
            f"max {gaps[-1]:.1f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--restarts", type=int, default=10, help="gaps per sample")
    parser.add_argument("--services", type=int, default=32)
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ddsup-bench",
    )
    args = parser.parse_args()
    binary = supervisord_binary(args.cache)
    results = {"ddsup": Sample(), "supervisord": Sample()}
    with tempfile.TemporaryDirectory(prefix="ddsup-bench-") as tmp:
        tools: list[Ddsup | Supervisord] = [Ddsup(Path(tmp)), Supervisord(Path(tmp), binary)]
        for rep in range(args.reps):
            order = tools if rep % 2 == 0 else tools[::-1]
            for tool in order:
                sample = results[tool.name]
                sample.gaps_ms += tool.restart_gaps(args.restarts, f"gap{rep}")
                cpu, rss, stop_s = tool.idle(args.services, args.idle_seconds, f"idle{rep}")
                sample.idle_cpu_pct.append(cpu)
                sample.rss_mib.append(rss)
                sample.stop_s.append(stop_s)
                print(
                    f"rep {rep + 1} {tool.name:<11}: gap median "
                    f"{median(sample.gaps_ms):7.1f} ms, idle {cpu:.3f} % core, "
                    f"rss {rss:.1f} MiB, stop {stop_s:.3f} s",
                    file=sys.stderr,
                )
    report(results, args)


if __name__ == "__main__":
    main()
