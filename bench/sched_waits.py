"""Who had the CPUs while ``ddsup start``'s loop waited for one: the kernel's trace of a scale run.

``scale_allocation.py`` says how late a lane's ready reached the endpoint's table, and the
controller's ``/proc`` schedstat says how long its loop waited for a CPU in all: not when,
nor behind whom. This runs one ``scale_allocation.py`` invocation (one variant: a single
``--stagger``, no ``--baseline``) with the kernel's ``sched_switch`` and ``sched_wakeup``
tracepoints on (tracefs; root), then reads the trace: every interval in which the
controller's event loop was runnable but not running (from its wake-up, or from being
preempted, until it is switched in), and, for the longest, what ran on the CPUs meanwhile,
by kind. Kinds come from the run's own ``events.jsonl`` (which names the controller's, each
agent's, each lane's and the endpoint's pid; threads count as their process, the trace
records thread-group ids) and otherwise from the command name. The oracle is the kernel's
scheduler, not ddsup's account of itself.

    .venv/bin/python bench/sched_waits.py run OUT [--seconds 15] -- [scale_allocation.py args]
    .venv/bin/python bench/sched_waits.py report OUT [--top 6] [--late-ms 50]

``run`` writes ``OUT/trace.txt``, ``OUT/readies.jsonl``, ``OUT/result.json``, the bench's
output (``OUT/bench.txt``) and the clock offset, keeps the run's state directory, and
prints the report.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import glob
import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACEFS = Path("/sys/kernel/tracing")
EVENTS = ("sched/sched_switch", "sched/sched_wakeup", "sched/sched_wakeup_new")
# "comm-pid (tgid) [cpu] flags timestamp: event: fields" (options/record-tgid)
LINE = re.compile(
    r"\s*(.+?)-(\d+)\s+(?:\(\s*(\d+|-+)\)\s+)?\[(\d+)\]\s+\S+\s+([\d.]+): (\w+): (.*)"
)
FIELD = re.compile(r"(\w+)=(\S+)")
BIN = 0.25  # seconds per row of the CPU-by-kind table


def tracefs(name: str, value: str) -> None:
    (TRACEFS / name).write_text(value)


def run(out: Path, seconds: float, bench_args: list[str]) -> None:
    if "--baseline" in bench_args or any("," in a for a in bench_args):
        raise SystemExit("sched_waits: one variant per run (a single --stagger, no --baseline)")
    if not (TRACEFS / "trace").exists():
        subprocess.run(["mount", "-t", "tracefs", "nodev", str(TRACEFS)], check=True)
    out.mkdir(parents=True, exist_ok=True)
    tracefs("tracing_on", "0")
    tracefs("trace", "")
    tracefs("trace_clock", "mono")
    tracefs("buffer_size_kb", "200000")
    tracefs("options/record-tgid", "1")
    tracefs("events/enable", "0")
    for event in EVENTS:
        tracefs(f"events/{event}/enable", "1")
    argv = [sys.executable, str(ROOT / "bench" / "scale_allocation.py"), *bench_args]
    argv += ["--keep", "--readies", str(out / "readies.jsonl"), "--json", str(out / "result.json")]
    (out / "offset").write_text(f"{time.time() - time.monotonic()}\n")
    try:
        with (out / "bench.txt").open("w") as log:
            tracefs("tracing_on", "1")
            bench = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                bench.wait(timeout=seconds)  # the start, and what follows it for a while
            tracefs("tracing_on", "0")
            bench.wait()
        (out / "trace.txt").write_text((TRACEFS / "trace").read_text())
    finally:  # the tracepoints off and the buffer emptied, however the bench ended
        tracefs("tracing_on", "0")
        tracefs("events/enable", "0")
        tracefs("trace", "")
    report(out, top=6, late_ms=50.0)


@dataclass
class Roles:
    """Who each pid is, from the run's ``events.jsonl``."""

    controller: int = 0
    kinds: dict[int, str] = field(default_factory=dict)

    @classmethod
    def of(cls, events_path: Path) -> Roles:
        roles = cls()
        for line in events_path.read_text().splitlines():
            event = json.loads(line)
            if event.get("event") == "containment":
                if event["supervisor"] == "controller":
                    roles.controller = event["pid"]
                    if event.get("sentinel"):
                        roles.kinds[event["sentinel"]] = "sentinel"
                else:
                    roles.kinds[event["pid"]] = "agent"
            elif event.get("event") == "process":
                kind = "endpoint" if event["instance"] == "endpoint" else "lane"
                roles.kinds[event["pid"]] = kind
        roles.kinds[roles.controller] = "controller"
        return roles

    def kind(self, tgid: int, comm: str) -> str:
        if tgid in self.kinds:
            return self.kinds[tgid]
        if tgid == 0:
            return "idle"
        if comm == "busybox":
            return "lane's child"  # busybox httpd forks one per request
        return comm.split("/")[0].split(":")[0]


@dataclass
class Trace:
    """The controller's waits for a CPU, and who ran on each CPU when."""

    roles: Roles
    waits: list[tuple[float, float]] = field(default_factory=list)
    spans: list[tuple[float, float, int, str]] = field(default_factory=list)  # pid, comm
    tgids: dict[int, int] = field(default_factory=dict)  # thread → its process

    @classmethod
    def read(cls, path: Path, offset: float, roles: Roles) -> Trace:
        trace = cls(roles)
        running: dict[int, tuple[float, int, str]] = {}
        waiting_since: float | None = None  # runnable, not running, since
        ctl = roles.controller
        for line in path.read_text().splitlines():
            match = LINE.match(line)
            if match is None:
                continue
            _comm, pid, tgid, cpu, stamp, name, rest = match.groups()
            if tgid is not None and tgid.isdigit():
                trace.tgids[int(pid)] = int(tgid)
            at = float(stamp) + offset
            fields = dict(FIELD.findall(rest))
            if name == "sched_switch":
                before, after = int(fields["prev_pid"]), int(fields["next_pid"])
                if int(cpu) in running:
                    since, ran, comm = running[int(cpu)]
                    trace.spans.append((since, at, ran, comm))
                running[int(cpu)] = (at, after, fields["next_comm"])
                if before == ctl:  # preempted (still runnable), or asleep: a wake-up
                    # noted while it ran was not a wait
                    waiting_since = at if fields["prev_state"].startswith("R") else None
                if after == ctl:
                    if waiting_since is not None:
                        trace.waits.append((waiting_since, at))
                    waiting_since = None
            elif name == "sched_wakeup" and int(fields["pid"]) == ctl and waiting_since is None:
                waiting_since = at  # a wake-up of a queued task changes nothing
        return trace

    def cpu_by_kind(self, start: float, end: float) -> dict[str, float]:
        """Seconds of CPU each kind used from ``start`` to ``end`` (a thread counts as
        its process: its thread-group id is known once it has run, so after the read)."""
        used: dict[str, float] = collections.defaultdict(float)
        for since, until, pid, comm in self.spans:
            overlap = min(until, end) - max(since, start)
            if overlap > 0:
                used[self.roles.kind(self.tgids.get(pid, pid), comm)] += overlap
        return used


def largest(used: dict[str, float], count: int) -> list[tuple[str, float]]:
    return sorted(used.items(), key=lambda item: -item[1])[:count]


def kept_roles(out: Path) -> Roles:
    """The roles of the one run whose state the bench kept (it says where in ``bench.txt``)."""
    text = (out / "bench.txt").read_text().splitlines()
    kept = [line.removeprefix("kept ") for line in text if line.startswith("kept /")]
    events = sorted(glob.glob(f"{kept[-1]}/run*/state/events.jsonl")) if kept else []
    if len(events) != 1:
        raise SystemExit(f"{out}: expected one kept run, found {events}")
    return Roles.of(Path(events[0]))


def report(out: Path, top: int, late_ms: float) -> None:
    roles = kept_roles(out)
    offset = float((out / "offset").read_text())
    trace = Trace.read(out / "trace.txt", offset, roles)
    readies = [json.loads(line) for line in (out / "readies.jsonl").read_text().splitlines()]
    first = min(row[2] for row in readies)
    lengths = sorted(end - start for start, end in trace.waits)
    print(f"controller {roles.controller}: {len(lengths)} waits for a CPU, {sum(lengths):.3f} s")
    if lengths:
        p99 = lengths[round(0.99 * (len(lengths) - 1))]
        print(f"  p50 {1e3 * lengths[len(lengths) // 2]:.2f} ms, p99 {1e3 * p99:.1f} ms, ", end="")
        print(f"longest {1e3 * lengths[-1]:.1f} ms; over 50 ms: {sum(w > 0.05 for w in lengths)}")
    print(
        f"the {top} longest (ms after the first lane's ready: length; CPU by kind meanwhile, ms):"
    )
    for start, end in sorted(sorted(trace.waits, key=lambda w: w[0] - w[1])[:top]):
        used = trace.cpu_by_kind(start, end)
        shares = ", ".join(f"{kind} {1e3 * s:.0f}" for kind, s in largest(used, 6))
        print(f"  {1e3 * (start - first):7.0f}: {1e3 * (end - start):5.1f}  ({shares})")
    late = sorted(
        (row[2], row[4] - row[2]) for row in readies if row[4] and row[4] - row[2] > late_ms / 1e3
    )
    print(f"lanes whose ready reached the table after {late_ms:g} ms: {len(late)}")
    for ready, latency in late[:12]:
        # the controller's longest wait for a CPU between this ready and its table entry
        covering = [min(e, ready + latency) - max(s, ready) for s, e in trace.waits]
        waited = max([c for c in covering if c > 0], default=0.0)
        print(f"  ready at {1e3 * (ready - first):6.0f} ms: {1e3 * latency:4.0f} ms", end="")
        print(f" (the controller waited {1e3 * waited:.0f} ms of it at once)")
    kinds = [k for k, _ in largest(trace.cpu_by_kind(first - 1, first + 4), 8)]
    print(f"CPU by kind per {1e3 * BIN:.0f} ms (ms), from 1 s before the first ready:")
    print("  from  " + " ".join(f"{k[:12]:>12}" for k in kinds))
    for row in range(int(5 / BIN)):
        start = first - 1 + row * BIN
        used = trace.cpu_by_kind(start, start + BIN)
        print(
            f"{start - first:6.2f}  " + " ".join(f"{1e3 * used.get(k, 0.0):12.0f}" for k in kinds)
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    traced = commands.add_parser("run", help="one scale_allocation.py run, traced, to OUT")
    traced.add_argument("out", type=Path)
    traced.add_argument("--seconds", type=float, default=15.0, help="trace this long")
    traced.add_argument("bench", nargs=argparse.REMAINDER, help="-- scale_allocation.py's")
    reported = commands.add_parser("report", help="read OUT again")
    reported.add_argument("out", type=Path)
    reported.add_argument("--top", type=int, default=6)
    reported.add_argument("--late-ms", type=float, default=50.0)
    args = parser.parse_args()
    if args.command == "run":
        run(args.out, args.seconds, [a for a in args.bench if a != "--"])
    else:
        report(args.out, args.top, args.late_ms)


if __name__ == "__main__":
    main()
