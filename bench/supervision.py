"""What supervision costs: ddsup's local engine next to supervisord 4.3.0 (and, with
``--baseline REV``, next to ddsup as of a git revision).

Every tool in one run, alternating (the order turns each repetition), ``--reps`` times;
medians and the ratios of ddsup (this checkout) to each other tool:

- **restart gap**: a bash unit writes ``s$EPOCHREALTIME`` first thing (a builtin: no
  fork), runs its body, writes ``x$EPOCHREALTIME`` and exits 1, restarted at once (ddsup:
  ``restart = "always"``, ``restart_sec = "0s"``; supervisord: ``autorestart=true``,
  ``startsecs=0``); the gap is from an ``x`` stamp to the next ``s`` stamp (so it includes
  bash's own start-up). Four bodies: none (the unit exits at once); a 0.3 s busy loop (no
  child); ``sleep 0.3 & wait`` (a child, gone at the exit: a unit that forks, as vLLM's
  API server does); ``sleep 30 & sleep 0.3`` (a child still running at the exit, which
  ddsup ends with the unit and supervisord leaves). A unit that lives longer than an RCU
  grace period is not the one that exits at once: the kernel's cgroup lock costs a grace
  period to the first move after a quiet spell (docs/no-orphans.md);
- **exit detection**: the unit that exits at once; the time from the stamp it writes
  right before ``exit 1`` to the supervisor noticing the exit: ddsup's ``events.jsonl``
  ``exit`` event (its ``time``), supervisord's ``exited:`` log line (millisecond stamps,
  truncated: +0.5 ms). Wall clock on both sides (ddsup's events carry Unix time). Then
  again with a grandchild (``sleep 5 &``) that holds the unit's stdout open;
- **stop of a SIGTERM-ignoring unit** (``trap '' TERM``) with a 2 s stop timeout
  (``timeout_stop = "2s"`` / ``stopwaitsecs=2``, ``stopasgroup``, ``killasgroup``): SIGTERM
  to the supervisor → the unit's exit (a pidfd) and → the supervisor's exit;
- **orphans**: a unit that starts ``setsid sleep 600 &`` and exits 1, restarted at once
  for ``--orphan-seconds``; live grandchildren while the supervisor still runs, and after
  it stopped (then they are killed);
- **idle CPU**: CPU time (user + system, psutil) of the supervisor's own processes
  (ddsup: ``ddsup start`` and its sentinel; supervisord: itself) over ``--idle-seconds``
  while each of ``--services`` sleeping units runs, as % of one core; their **RSS** then;
  and **stop**: SIGTERM to the supervisor → its exit, with all those services running.

Every process a measurement starts carries ``DDSUP_BENCH_MARK=<random>`` in its
environment; after each measurement every live process with that mark is SIGKILLed and
counted (a leftover is reported, never left). supervisord is installed into its own venv
under ``--cache`` (``python -m venv``, ``pip install supervisor==4.3.0``) when it is among
``--tools`` and not there yet. ``--baseline REV`` runs ``python -m ddsup`` with REV's
source first on ``PYTHONPATH`` (a ``git archive``, or a directory holding the source)
beside this checkout, as a tool of its own.

``--background N`` keeps N idle ``sleep`` processes alive during the run (ddsup's
per-exit clean-up reads every process's environment, so its costs grow with the number
of processes on the machine); ``--tools`` runs some tools only (the baseline goes with
``ddsup``).

    .venv/bin/python bench/supervision.py [--reps 3] [--services 32,256] \
        [--idle-seconds 10] [--only gap,exit,stop,orphans,idle] [--tools ddsup,supervisord] \
        [--baseline REV] [--background 0] [--json out.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import defaultdict
from collections.abc import Callable
from contextlib import AbstractContextManager, suppress
from pathlib import Path

import psutil
from scale_allocation import compile_bytecode
from side_by_side import (
    baseline_code,
    baseline_env,
    kill_marked,
    marked_process,
    marked_processes,
    rotations,
)

SUPERVISOR_VERSION = "4.3.0"
STOP_TIMEOUT_S = 2.0
CRASH_SH = 'echo "$EPOCHREALTIME" >> "$0"; exit 1'
# metric → the restart gap's unit between its two stamps (bash; see the module docstring)
GAP_UNITS = {
    "gap_ms": ":",
    "gap_busy_ms": "s=${EPOCHREALTIME/./}; while (( ${EPOCHREALTIME/./} - s < 300000 )); do :; done",
    "gap_child_ms": "sleep 0.3 & wait",
    "gap_left_ms": "sleep 30 & sleep 0.3",
}
HOLD_PIPE_SH = 'sleep 5 & echo "$EPOCHREALTIME" >> "$0"; exit 1'
ORPHAN_SH = 'setsid sleep 600 & echo "$EPOCHREALTIME" >> "$0"; exit 1'
IGNORE_TERM_SH = "trap '' TERM; echo $$ > \"$0\"; while :; do sleep 1; done"
GOALS = {
    "gap_ms": 25.0,
    "gap_child_ms": 5.0,
    "idle_cpu_pct:32": 1.0,
    "stop_s:32": 1.5,
}
BASH = shutil.which("bash") or "/bin/bash"

# metric name -> tool -> values
Results = dict[str, dict[str, list[float]]]
Phases = dict[str, list[float]]


# --- helpers -------------------------------------------------------------------------
def wait_until(check: Callable[[], bool], limit: float, what: str) -> None:
    """Bounded poll for an external condition (a file or another process's state)."""
    deadline = time.monotonic() + limit
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"bench: timed out after {limit:g}s waiting for {what}")
        time.sleep(0.01)


def stamps(path: Path) -> list[float]:
    """Unix times (seconds) the unit wrote, one a line; a half-written last line is skipped."""
    if not path.exists():
        return []
    lines = path.read_text().split("\n")
    return [float(x) for x in lines[:-1] if x]


def gap_script(work: Path, metric: str) -> Path:
    """The restart gap's unit for ``metric``, as a bash script (``$1``: its stamps file)."""
    script = work / f"{metric}.sh"
    body = GAP_UNITS[metric]
    script.write_text(
        f'echo "s$EPOCHREALTIME" >> "$1"\n{body}\necho "x$EPOCHREALTIME" >> "$1"\nexit 1\n'
    )
    return script


def exit_start_stamps(path: Path) -> tuple[list[float], list[float]]:
    """(exit stamps, start stamps) a gap unit wrote, in order; a half-written last line is
    skipped."""
    exits: list[float] = []
    starts: list[float] = []
    if path.exists():
        for line in path.read_text().split("\n")[:-1]:
            (exits if line.startswith("x") else starts).append(float(line[1:]))
    return exits, starts


def restarted(path: Path, count: int) -> Callable[[], bool]:
    """Whether the gap unit writing ``path`` has started ``count`` times after its first."""
    return lambda: len(exit_start_stamps(path)[1]) > count


def exit_to_start_ms(path: Path, count: int) -> list[float]:
    """The first ``count`` gaps from an exit stamp to the next start stamp."""
    exits, starts = exit_start_stamps(path)
    return [(start - end) * 1e3 for end, start in zip(exits, starts[1:], strict=False)][:count]


def own_processes(root: psutil.Process, unit_names: tuple[str, ...]) -> list[psutil.Process]:
    """The supervisor and its helper processes, not the units it supervises."""
    found = [root]
    for child in root.children(recursive=True):
        with suppress(psutil.NoSuchProcess):
            if child.name() not in unit_names:
                found.append(child)
    return found


def cpu_seconds(processes: list[psutil.Process]) -> float:
    total = 0.0
    for proc in processes:
        with suppress(psutil.NoSuchProcess):
            times = proc.cpu_times()
            total += times.user + times.system
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
        raise SystemExit(f"bench: supervisor did not stop within {limit}s") from None
    return time.monotonic() - start


def wait_exit(pidfd: int, limit: float) -> float:
    """Block until the process behind ``pidfd`` exited; the monotonic time it was seen."""
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    if not poller.poll(limit * 1e3):
        raise SystemExit(f"bench: unit did not exit within {limit:g}s")
    return time.monotonic()


def started(
    argv: list[str], output: Path, env: dict[str, str] | None = None
) -> AbstractContextManager[subprocess.Popen[bytes]]:
    """A supervisor under test, marked, in the C locale (supervisord's log stamps)."""
    return marked_process(argv, output, stop_timeout=30, env=env or {"LC_ALL": "C"})


def measure_idle(process: subprocess.Popen[bytes], seconds: float) -> tuple[float, float, float]:
    """(% of one core, RSS MiB, stop seconds) of the supervisor's own processes."""
    time.sleep(1.0)  # let start-up work settle before the window opens
    procs = own_processes(psutil.Process(process.pid), ("sleep",))
    before = cpu_seconds(procs)
    time.sleep(seconds)  # the measurement window itself
    used = cpu_seconds(procs) - before
    memory = rss_mib(procs)
    return 100.0 * used / seconds, memory, stop(process)


def measure_stop_timeout(process: subprocess.Popen[bytes], pid_file: Path) -> tuple[float, float]:
    """SIGTERM to the supervisor → (the unit's exit, the supervisor's exit), seconds."""
    wait_until(lambda: pid_file.exists() and pid_file.read_text().endswith("\n"), 60, "unit pid")
    time.sleep(0.3)  # the unit is past its trap and sleeping (no event to await: its state)
    pidfd = os.pidfd_open(int(pid_file.read_text()))
    try:
        start = time.monotonic()
        process.send_signal(signal.SIGTERM)
        unit_gone = wait_exit(pidfd, 30) - start
    finally:
        os.close(pidfd)
    process.wait(timeout=30)
    return unit_gone, time.monotonic() - start


def count_orphans(process: subprocess.Popen[bytes], seconds: float) -> tuple[float, float]:
    """(live setsid grandchildren after ``seconds`` of restarts, live after the stop)."""
    time.sleep(seconds)  # the restart loop runs for this long: the measurement window
    live = sum(p.name() == "sleep" for p in marked_processes())
    stop(process)
    after = sum(p.name() == "sleep" for p in marked_processes())
    return float(live), float(after)


def gap_phases(exits: list[float], starts: list[float], events_path: Path) -> Phases:
    """Where ddsup's restart gap goes, per restart, from its events and the unit's stamps.

    The k-th ``exit`` event is the exit of the process that wrote exit stamp k.
    ``exit``: stamp → ``exit`` (ddsup saw the exit and reaped it); ``restart``: →
    ``starting`` (the end of what the unit left, the restart decision, the
    ``restarting`` event); ``start``: → the next start stamp (ddsup's fork/exec and
    bash's own start-up).
    ``spawn`` (overlaps ``start``): ``starting`` → the ``process`` event, written once
    the spawn call returned (the child has exec'd; bash may already have run).
    """
    seen: list[float] = []
    starting: list[float] = []
    process: list[float] = []
    for line in events_path.read_text().splitlines():
        event = json.loads(line)
        kind = event.get("to") if event["event"] == "unit" else event["event"]
        {"exit": seen, "starting": starting, "process": process}.get(str(kind), []).append(
            float(event["time"])
        )
    phases: Phases = defaultdict(list)
    # starting[0]/process[0] are the first start; restart k is followed by start k+1
    for k, noticed in enumerate(seen[: min(len(exits), len(starts) - 1)]):
        if k + 1 >= len(starting) or k + 1 >= len(process):
            break
        phases["gap_exit_ms"].append((noticed - exits[k]) * 1e3)
        phases["gap_restart_ms"].append((starting[k + 1] - noticed) * 1e3)
        phases["gap_start_ms"].append((starts[k + 1] - starting[k + 1]) * 1e3)
        phases["gap_spawn_ms"].append((process[k + 1] - starting[k + 1]) * 1e3)
    return phases


# --- ddsup ---------------------------------------------------------------------------
def service(argv: list[str], **keys: object) -> str:
    lines = ['[unit]\ntype = "service"\n[service]', f"exec = {json.dumps(argv)}"]
    lines += [f"{key} = {json.dumps(value)}" for key, value in keys.items()]
    return "\n".join(lines) + "\n"


RESTART_AT_ONCE: dict[str, object] = {
    "restart": "always",
    "restart_sec": "0s",
    "start_limit_burst": 1000000,
    "start_limit_interval": "1s",
}


class Ddsup:
    """``python -m ddsup start`` of this checkout, or with ``code`` (a ``supervisor``
    tree) first on ``PYTHONPATH``: another revision's."""

    def __init__(self, work: Path, name: str = "ddsup", code: Path | None = None) -> None:
        self.work = work
        self.name = name
        self.env = {**({} if code is None else baseline_env(code)), "LC_ALL": "C"}

    def _start(self, units: dict[str, str], tag: str) -> tuple[list[str], Path]:
        directory = self.work / f"{self.name}-{tag}"
        shutil.rmtree(directory, ignore_errors=True)
        (directory / "units").mkdir(parents=True)
        for name, text in units.items():
            (directory / "units" / f"{name}.toml").write_text(text)
        state = directory / "state"
        argv = [sys.executable, "-m", "ddsup", "start", str(directory / "units")]
        return [*argv, "--state-dir", str(state), "-q"], state

    def _exits(self, state: Path) -> list[float]:
        """Times of the ``exit`` events (ddsup noticed an exit), oldest first."""
        path = state / "events.jsonl"
        if not path.exists():
            return []
        out = []
        for line in path.read_text().splitlines():
            if '"event": "exit"' in line:
                out.append(float(json.loads(line)["time"]))
        return out

    def _crash_loop(self, argv: list[str], tag: str) -> tuple[list[str], Path, Path]:
        stamps_file = self.work / f"{self.name}-stamps-{tag}"
        stamps_file.unlink(missing_ok=True)
        unit = service([*argv, str(stamps_file)], **RESTART_AT_ONCE)
        command, state = self._start({"crash": unit}, tag)
        return command, state, stamps_file

    def restart_gaps(self, metric: str, count: int, tag: str) -> tuple[list[float], Phases]:
        script = gap_script(self.work, metric)
        argv, state, stamps_file = self._crash_loop([BASH, str(script)], tag)
        with started(argv, state.parent / "output", self.env) as process:
            wait_until(restarted(stamps_file, count), 60 + count * 0.5, f"{self.name} restarts")
            stop(process)
        exits, starts = exit_start_stamps(stamps_file)
        phases = gap_phases(exits, starts, state / "events.jsonl")
        return exit_to_start_ms(stamps_file, count), phases

    def exit_latency(self, count: int, tag: str, hold_pipe: bool) -> list[float]:
        script = HOLD_PIPE_SH if hold_pipe else CRASH_SH
        argv, state, stamps_file = self._crash_loop([BASH, "-c", script], tag)
        with started(argv, state.parent / "output", self.env) as process:
            wait_until(lambda: len(self._exits(state)) >= count, 60, "ddsup exits")
            stop(process)
        pairs = zip(stamps(stamps_file), self._exits(state)[:count], strict=False)
        return [(seen - wrote) * 1e3 for wrote, seen in pairs]

    def stop_timeout(self, tag: str) -> tuple[float, float]:
        pid_file = self.work / f"{self.name}-pid-{tag}"
        pid_file.unlink(missing_ok=True)
        unit = service([BASH, "-c", IGNORE_TERM_SH, str(pid_file)], timeout_stop="2s")
        argv, state = self._start({"stubborn": unit}, tag)
        with started(argv, state.parent / "output", self.env) as process:
            return measure_stop_timeout(process, pid_file)

    def orphans(self, seconds: float, tag: str) -> tuple[float, float, float]:
        argv, state, stamps_file = self._crash_loop([BASH, "-c", ORPHAN_SH], tag)
        with started(argv, state.parent / "output", self.env) as process:
            live, after = count_orphans(process, seconds)
        return float(len(stamps(stamps_file))), live, after

    def idle(self, services: int, seconds: float, tag: str) -> tuple[float, float, float]:
        unit = service(["sleep", "3600"])
        argv, state = self._start({f"s{i:03d}": unit for i in range(services)}, tag)
        with started(argv, state.parent / "output", self.env) as process:

            def all_ready() -> bool:
                path = state / "events.jsonl"
                if not path.exists():
                    return False
                return path.read_text().count('"to": "ready"') >= services

            wait_until(all_ready, 120, "ddsup services ready")
            return measure_idle(process, seconds)


# --- supervisord ---------------------------------------------------------------------
EXITED_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) [A-Z]+ exited: crash ")


class Supervisord:
    name = "supervisord"

    def __init__(self, work: Path, binary: Path) -> None:
        self.work = work
        self.binary = binary

    def _start(self, programs: str, tag: str, loglevel: str = "warn") -> tuple[list[str], Path]:
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
                loglevel={loglevel}
                """)
            + programs
        )
        return [str(self.binary), "-c", str(conf)], directory

    def _crash_loop(self, command: str, tag: str) -> tuple[list[str], Path, Path]:
        stamps_file = self.work / f"supervisord-stamps-{tag}"
        stamps_file.unlink(missing_ok=True)
        program = textwrap.dedent(f"""\
            [program:crash]
            command={command} {stamps_file}
            autorestart=true
            startsecs=0
            startretries=1000000
            """)
        argv, directory = self._start(program, tag, loglevel="info")
        return argv, directory, stamps_file

    def _exits(self, directory: Path) -> list[float]:
        """Times of the ``exited: crash`` log lines, +0.5 ms (the stamp is truncated)."""
        path = directory / "supervisord.log"
        if not path.exists():
            return []
        out = []
        for line in path.read_text().splitlines():
            match = EXITED_LINE.match(line)
            if match:
                wall = datetime.datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S")
                out.append(time.mktime(wall.timetuple()) + (int(match[2]) + 0.5) / 1e3)
        return out

    def restart_gaps(self, metric: str, count: int, tag: str) -> tuple[list[float], Phases]:
        script = gap_script(self.work, metric)
        argv, directory, stamps_file = self._crash_loop(f"{BASH} {script}", tag)
        with started(argv, directory / "output") as process:
            wait_until(restarted(stamps_file, count), 120 + count * 1.5, "supervisord restarts")
            stop(process)
        return exit_to_start_ms(stamps_file, count), {}

    def exit_latency(self, count: int, tag: str, hold_pipe: bool) -> list[float]:
        script = HOLD_PIPE_SH if hold_pipe else CRASH_SH
        argv, directory, stamps_file = self._crash_loop(_bash_c(script), tag)
        with started(argv, directory / "output") as process:
            wait_until(lambda: len(self._exits(directory)) >= count, 120, "supervisord exits")
            stop(process)
        pairs = zip(stamps(stamps_file), self._exits(directory)[:count], strict=False)
        return [(seen - wrote) * 1e3 for wrote, seen in pairs]

    def stop_timeout(self, tag: str) -> tuple[float, float]:
        pid_file = self.work / f"supervisord-pid-{tag}"
        pid_file.unlink(missing_ok=True)
        quoted = IGNORE_TERM_SH.replace('"', '\\"')
        program = textwrap.dedent(f"""\
            [program:stubborn]
            command={BASH} -c "{quoted}" {pid_file}
            startsecs=0
            stopwaitsecs={STOP_TIMEOUT_S:g}
            stopasgroup=true
            killasgroup=true
            """)
        argv, directory = self._start(program, tag)
        with started(argv, directory / "output") as process:
            return measure_stop_timeout(process, pid_file)

    def orphans(self, seconds: float, tag: str) -> tuple[float, float, float]:
        argv, directory, stamps_file = self._crash_loop(_bash_c(ORPHAN_SH), tag)
        with started(argv, directory / "output") as process:
            live, after = count_orphans(process, seconds)
        return float(len(stamps(stamps_file))), live, after

    def idle(self, services: int, seconds: float, tag: str) -> tuple[float, float, float]:
        programs = "".join(
            f"[program:s{i:03d}]\ncommand=sleep 3600\nstartsecs=0\n" for i in range(services)
        )
        argv, directory = self._start(programs, tag)
        with started(argv, directory / "output") as process:
            root = psutil.Process(process.pid)

            def all_running() -> bool:
                sleeping = [c for c in root.children() if c.name() == "sleep"]
                return len(sleeping) >= services

            wait_until(all_running, 120, "supervisord programs running")
            return measure_idle(process, seconds)


def _bash_c(script: str) -> str:
    """``bash -c SCRIPT`` as a supervisord ``command=`` (its ``%`` and quotes escaped)."""
    quoted = script.replace("%", "%%").replace('"', '\\"')
    return f'{BASH} -c "{quoted}"'


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


# --- one repetition --------------------------------------------------------------------
Tool = Ddsup | Supervisord


def run_tool(tool: Tool, rep: int, args: argparse.Namespace, out: Results) -> None:
    """Every selected measurement of one tool, once; appends to ``out[metric][tool]``."""

    def add(metric: str, *values: float) -> None:
        out[metric][tool.name].extend(values)
        out[f"load:{metric}"][tool.name].append(os.getloadavg()[0])

    only = args.only
    if "gap" in only:
        for metric in GAP_UNITS:
            gaps, phases = tool.restart_gaps(metric, args.restarts, f"{metric}{rep}")
            add(metric, *gaps)
            if metric == PHASED:
                for phase, values in phases.items():
                    add(phase, *values)
    if "exit" in only:
        add("exit_ms", *tool.exit_latency(args.restarts, f"exit{rep}", hold_pipe=False))
        add("exit_held_ms", *tool.exit_latency(args.restarts, f"held{rep}", hold_pipe=True))
    if "stop" in only:
        unit_s, supervisor_s = tool.stop_timeout(f"stop{rep}")
        add("stop_unit_s", unit_s)
        add("stop_supervisor_s", supervisor_s)
    if "orphans" in only:
        starts, live, after = tool.orphans(args.orphan_seconds, f"orph{rep}")
        add("orphan_starts", starts)
        add("orphans_live", live)
        add("orphans_after_stop", after)
    if "idle" in only:
        for count in args.services:
            cpu, rss, stop_s = tool.idle(count, args.idle_seconds, f"idle{count}-{rep}")
            add(f"idle_cpu_pct:{count}", cpu)
            add(f"rss_mib:{count}", rss)
            add(f"stop_s:{count}", stop_s)
    leftovers = kill_marked()
    if leftovers:
        print(f"bench: killed {leftovers} leftover processes of {tool.name}", file=sys.stderr)


# --- report --------------------------------------------------------------------------
PHASED = "gap_child_ms"  # the gap whose phases are told (ddsup's, from its events)
LABELS = {
    "gap_ms": "restart gap, exits at once (ms)",
    "gap_busy_ms": "restart gap, busy 0.3 s, no child (ms)",
    "gap_child_ms": "restart gap, 0.3 s, a child gone (ms)",
    "gap_left_ms": "restart gap, 0.3 s, a child left running (ms)",
    "gap_exit_ms": "  gap with a child: stamp → exit seen (ms)",
    "gap_restart_ms": "  gap with a child: → starting (ms)",
    "gap_start_ms": "  gap with a child: → next stamp (ms)",
    "gap_spawn_ms": "  gap with a child: the spawn call (ms)",
    "exit_ms": "exit detection (ms)",
    "exit_held_ms": "exit detection, pipe held (ms)",
    "stop_unit_s": "stop, TERM ignored, timeout 2 s: unit gone (s)",
    "stop_supervisor_s": "stop, TERM ignored, timeout 2 s: supervisor gone (s)",
    "orphan_starts": "orphan loop: starts",
    "orphans_live": "orphan loop: live grandchildren, running",
    "orphans_after_stop": "orphan loop: live grandchildren, after stop",
    "idle_cpu_pct": "idle CPU, {} services (% core)",
    "rss_mib": "RSS, {} services (MiB)",
    "stop_s": "stop of {} services (s)",
}


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def label(metric: str) -> str:
    name, _, count = metric.partition(":")
    return LABELS[name].format(count)


def verdict(metric: str, mine: float) -> str:
    goal = GOALS.get(metric)
    if goal is None:
        return ""
    return f"≤ {goal:g}: {'met' if mine <= goal else 'MISSED'}"


def report(results: Results, args: argparse.Namespace, names: list[str]) -> None:
    """One row per metric: each tool's median, ddsup's ratio to each other tool."""
    print(
        f"\n{args.reps} repetitions, alternating; load average now {os.getloadavg()[0]:.2f} "
        f"on {os.cpu_count()} CPUs; {len(psutil.pids())} processes on the machine "
        f"(+{args.background} background during the run)"
    )
    others = [name for name in names if name != "ddsup"]
    cells = [f"{name:>12}" for name in names] + [f"{'/ ' + n:>14}" for n in others]
    print(f"| {'metric':<52} | " + " | ".join(cells) + " | n | load | goal |")
    print("|" + "---|" * (len(cells) + 4))
    for metric, per_tool in results.items():
        if metric.startswith("load:"):
            continue
        medians = {name: median(per_tool.get(name, [])) for name in names}
        mine = medians.get("ddsup", float("nan"))
        ratios = [mine / medians[n] if medians[n] else float("nan") for n in others]
        loads = [x for name in names for x in results[f"load:{metric}"].get(name, [])]
        counts = "/".join(str(len(per_tool.get(name, []))) for name in names)
        row = [f"{medians[name]:>12.3f}" for name in names] + [f"{r:>14.3f}" for r in ratios]
        print(
            f"| {label(metric):<52} | " + " | ".join(row) + f" | {counts} "
            f"| {min(loads):.1f}–{max(loads):.1f} | {verdict(metric, mine)} |"
        )
    tick = 100.0 / os.sysconf("SC_CLK_TCK") / args.idle_seconds
    print(f"(CPU time is counted in clock ticks: 0 means < {tick:.2f} % of a core)")
    for metric in (*GAP_UNITS, "exit_ms", "exit_held_ms"):
        for tool, values in results.get(metric, {}).items():
            ordered = sorted(values)
            if ordered:
                p90 = ordered[int(0.9 * (len(ordered) - 1))]
                print(
                    f"{metric} {tool}: min {ordered[0]:.1f}, median {median(ordered):.1f}, "
                    f"p90 {p90:.1f}, max {ordered[-1]:.1f}"
                )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--restarts", type=int, default=10, help="samples per measurement")
    parser.add_argument(
        "--services", type=lambda s: [int(x) for x in s.split(",")], default=[32, 256]
    )
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--orphan-seconds", type=float, default=10.0)
    parser.add_argument(
        "--only",
        type=lambda s: set(s.split(",")),
        default={"gap", "exit", "stop", "orphans", "idle"},
        help="comma-separated subset of gap,exit,stop,orphans,idle",
    )
    parser.add_argument(
        "--background",
        type=int,
        default=0,
        help="extra idle processes (sleep) on the machine during the run",
    )
    parser.add_argument(
        "--tools",
        type=lambda s: s.split(","),
        default=["ddsup", "supervisord"],
        help="comma-separated subset of ddsup,supervisord (the baseline goes with ddsup)",
    )
    parser.add_argument(
        "--baseline",
        metavar="REV",
        help="also run ddsup as of this git revision (or a directory holding its source)",
    )
    parser.add_argument("--json", type=Path, help="also write the raw samples here")
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ddsup-bench",
    )
    return parser.parse_args()


def the_tools(args: argparse.Namespace, work: Path) -> list[Tool]:
    """The tools of this run, in the order of the first repetition: this checkout, the
    baseline, supervisord (installed first if it is not there yet)."""
    tools: list[Tool] = []
    if "ddsup" in args.tools:
        tools.append(Ddsup(work))
        if args.baseline:
            code = baseline_code(args.baseline, work / "baseline")
            compile_bytecode([code])  # as an installed ddsup is: not compiled in each run
            tools.append(Ddsup(work, f"ddsup@{args.baseline}", code))
    if "supervisord" in args.tools:
        tools.append(Supervisord(work, supervisord_binary(args.cache)))
    return tools


def main() -> None:
    args = parse_args()
    results: Results = defaultdict(lambda: defaultdict(list))
    background: list[subprocess.Popen[bytes]] = []
    names: list[str] = []
    try:
        for _ in range(args.background):  # not marked: the sweeps after each measurement
            # must leave them; killed by pid below
            background.append(subprocess.Popen(["sleep", "3600"], stdin=subprocess.DEVNULL))
        with tempfile.TemporaryDirectory(prefix="ddsup-bench-") as tmp:
            tools = the_tools(args, Path(tmp))
            names = [tool.name for tool in tools]
            for rep, order in enumerate(rotations(tools, args.reps)):
                for tool in order:
                    started_at = time.monotonic()
                    run_tool(tool, rep, args, results)
                    took = time.monotonic() - started_at
                    print(
                        f"rep {rep + 1} {tool.name:<11} done in {took:.0f}s, "
                        f"load {os.getloadavg()[0]:.2f}",
                        file=sys.stderr,
                    )
    finally:
        for proc in background:
            proc.kill()
            proc.wait()
        kill_marked()
    report(results, args, names)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
