"""What each kind of process spent its CPU on during a scale run's start: Python, or which
kernel path (copy-on-write faults, other page faults, fork and exec, cgroup moves, sockets).

``sched_waits.py`` says who held the two CPUs while ``ddsup start``'s loop waited for one
(the simulated nodes' agents, mostly); this says what they did with them, from ``perf``'s
call stacks sampled on every CPU, not from ddsup's account of itself. It runs one
``scale_allocation.py`` invocation (one variant) under ``perf record -a -g`` on the
``cpu-clock`` event (a sample is 1/``--frequency`` s of a CPU's time, whoever ran), then
sorts every sample by the kind of process it hit (the pids the run's ``events.jsonl``
names, as ``sched_waits.Roles`` reads them; a thread counts as its process) and by the
first kernel path its stack passes through, in three windows around the first lane's
ready: the second before it (the agents' start, preflight, the first spawns), the first
half second after it (the first wave) and the 2.5 s after that.

    .venv/bin/python bench/cpu_paths.py run OUT [--seconds 10] [--frequency 499] -- [scale_allocation.py args]
    .venv/bin/python bench/cpu_paths.py report OUT

``run`` writes ``OUT/perf.data``, its text (``OUT/samples.txt``), ``OUT/readies.jsonl``,
``OUT/result.json``, the bench's output (``OUT/bench.txt``) and the clock offset, keeps
the run's state directory, and prints the report. Needs ``perf`` (Debian's
``linux-perf``) and root or ``kernel.perf_event_paranoid`` ≤ 0.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from sched_waits import Roles, kept_roles  # the same reading of events.jsonl

ROOT = Path(__file__).resolve().parent.parent
# "comm pid/tid time:" (comm may hold spaces: "Trio thread 0"), then one frame a line
HEADER = re.compile(r"^(.*?)\s+(\d+)/(\d+)\s+([\d.]+):")
# the first of these a stack passes through (innermost first) names the sample's path
PATHS = (
    ("copy-on-write fault", re.compile(r"\bdo_wp_page\b")),
    ("other page fault", re.compile(r"\b(handle_mm_fault|exc_page_fault)\b")),
    ("fork, exec, exit", re.compile(r"\b(copy_process|\w*execve\w*|do_exit|exit_mmap)\b")),
    ("cgroup", re.compile(r"\b\w*cgroup\w*\b")),
    ("socket", re.compile(r"\b(tcp_\w+|unix_\w+|sock_\w+|inet_\w+|__sys_\w*(send|recv)\w*)\b")),
    ("file", re.compile(r"\b(vfs_\w+|path_openat|ksys_read|ksys_write)\b")),
    ("scheduler, futex", re.compile(r"\b(schedule|__schedule|futex_\w+|try_to_wake_up)\b")),
)
KERNEL = "[kernel.kallsyms]"
WINDOWS = (
    ("1 s before the first ready", -1.0, 0.0),
    ("first 0.5 s", 0.0, 0.5),
    ("0.5 s to 3 s", 0.5, 3.0),
)


@dataclass(frozen=True)
class Sample:
    """One ``cpu-clock`` sample: when, whose (process id), and what it was doing."""

    at: float  # perf's clock (CLOCK_MONOTONIC) + the offset: the readies' wall clock
    pid: int
    comm: str
    path: str


def path_of(frames: list[str]) -> str:
    """The first kernel path of ``PATHS`` on the stack (innermost frame first); else
    "other kernel" when the innermost frame is the kernel's, else "user"."""
    kernel = [frame for frame in frames if KERNEL in frame]
    stack = " ".join(kernel)
    for name, pattern in PATHS:
        if pattern.search(stack):
            return name
    return "other kernel" if frames and KERNEL in frames[0] else "user"


def samples(text: str, offset: float) -> Iterator[Sample]:
    """The samples of ``perf script -F comm,pid,tid,time,ip,sym,dso`` output."""
    for block in text.split("\n\n"):
        lines = block.strip("\n").splitlines()
        match = HEADER.match(lines[0].strip()) if lines else None
        if match is None:
            continue
        comm, pid, _tid, stamp = match.groups()
        yield Sample(float(stamp) + offset, int(pid), comm, path_of(lines[1:]))


def table(found: list[Sample], roles: Roles, start: float, end: float) -> dict[str, dict[str, int]]:
    """Samples from ``start`` to ``end``: kind → path → count."""
    counts: dict[str, dict[str, int]] = collections.defaultdict(collections.Counter)
    for sample in found:
        if start <= sample.at < end:
            counts[roles.kind(sample.pid, sample.comm)][sample.path] += 1
    return counts


def run(out: Path, seconds: float, frequency: int, bench_args: list[str]) -> None:
    if "--baseline" in bench_args or any("," in a for a in bench_args):
        raise SystemExit("cpu_paths: one variant per run (a single --stagger, no --baseline)")
    out.mkdir(parents=True, exist_ok=True)
    data = out / "perf.data"
    perf = ["perf", "record", "-a", "-g", "-e", "cpu-clock", "-F", str(frequency), "-k", "mono"]
    argv = [sys.executable, str(ROOT / "bench" / "scale_allocation.py"), *bench_args]
    argv += ["--keep", "--readies", str(out / "readies.jsonl"), "--json", str(out / "result.json")]
    (out / "offset").write_text(f"{time.time() - time.monotonic()}\n")
    (out / "frequency").write_text(f"{frequency}\n")
    recorder = subprocess.Popen([*perf, "-o", str(data), "--", "sleep", str(seconds)])
    with (out / "bench.txt").open("w") as log:
        subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, check=False)
    recorder.wait()
    script = ["perf", "script", "-i", str(data), "-F", "comm,pid,tid,time,ip,sym,dso"]
    with (out / "samples.txt").open("w") as text:
        subprocess.run(script, stdout=text, stderr=subprocess.DEVNULL, check=True)
    report(out)


def report(out: Path) -> None:
    roles = kept_roles(out)
    offset = float((out / "offset").read_text())
    ms = 1e3 / int((out / "frequency").read_text())
    found = list(samples((out / "samples.txt").read_text(), offset))
    readies = [json.loads(line) for line in (out / "readies.jsonl").read_text().splitlines()]
    first = min(row[2] for row in readies)
    for title, start, end in WINDOWS:
        counts = table(found, roles, first + start, first + end)
        busy = sum(sum(paths.values()) for kind, paths in counts.items() if kind != "idle")
        every = sum(sum(paths.values()) for paths in counts.values())
        print(f"{title}: {busy * ms:.0f} of {every * ms:.0f} CPU ms busy; by kind and path")
        for kind, paths in sorted(counts.items(), key=lambda item: -sum(item[1].values())):
            total = sum(paths.values())
            if kind == "idle" or total * ms < 5:
                continue
            parts = ", ".join(
                f"{path} {100 * n / total:.0f} %"
                for path, n in sorted(paths.items(), key=lambda item: -item[1])
                if n * 20 >= total
            )
            print(f"  {kind:14s} {total * ms:6.0f}  ({parts})")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    recorded = commands.add_parser("run", help="one scale_allocation.py run under perf, to OUT")
    recorded.add_argument("out", type=Path)
    recorded.add_argument("--seconds", type=float, default=10.0, help="record this long")
    recorded.add_argument("--frequency", type=int, default=499, help="samples per CPU second")
    recorded.add_argument("bench", nargs=argparse.REMAINDER, help="-- scale_allocation.py's")
    reported = commands.add_parser("report", help="read OUT again")
    reported.add_argument("out", type=Path)
    args = parser.parse_args()
    if args.command == "run":
        run(args.out, args.seconds, args.frequency, [a for a in args.bench if a != "--"])
    else:
        report(args.out)


if __name__ == "__main__":
    main()
