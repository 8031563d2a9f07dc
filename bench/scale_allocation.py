"""The control plane at allocation scale: 128 simulated nodes × 8 lanes on one controller.

``ddsup start --nodes N --gpus-per-node 8`` of one lane unit (``replicas = "auto"``: one
lane per GPU) and the built-in endpoint (``min_ready = 1``, so it runs while the lanes
come up and every lane joins its table live). Each lane is ``busybox httpd`` (Debian's
busybox, ~2 MiB RSS, answers ``/health`` and ``/metrics`` from files), so the lanes' own
cost does not hide ddsup's. The bench installs busybox with apt-get when it is missing.

For each ``--stagger`` variant, one run:

- **start**: spawn of ``ddsup start`` → its ``run starting`` event (Python start-up) →
  every agent's first event → all lanes ready; the slowest lane's own
  ``starting`` → ``ready``; the overhead beyond it; CPU of the controller, of the
  agents, of the endpoint (its start-up and the lanes joining its table) and of the
  lanes until then, and of the children the controller has reaped by
  then (the local agents' forker, which has exited);
- **latency**: a lane's ``ready`` (stamped by its agent) → the line in ``events.jsonl``
  (seen by a reader here polling it every 2 ms: an upper bound) → the lane in the
  endpoint's table (``feed_watch.py``: a second subscriber running the endpoint's own
  feed code);
- **memory and processes**: RSS of the controller, each agent, the sentinels, the
  endpoint; processes and file descriptors of the controller;
- **idle**: CPU of the controller, agents and sentinels over ``--idle`` seconds;
- **status**: ``ddsup status`` and ``status --json``, wall time and output size;
- **trickle**: SIGKILL to ``--trickle`` lanes one at a time, 0.25 s apart, each on
  another node (they restart): the latencies above for their ready events, the steady
  state of a long run rather than the burst of a start;
- **churn**: SIGKILL to ``--churn`` of the lanes at once (they restart): until all are
  ready again, the controller's CPU per event, and the feed's latency for them;
- **stop**: SIGTERM → the last lane's ``exited`` → ``ddsup start`` exits.

Only the first stagger variant of each code runs idle, status, trickle and churn.
``--baseline REV`` runs ddsup as it was at that git revision too (``side_by_side.py``),
alternating with the checkout, so before and after come from one run on the same
machine; the baseline runs first unless ``--checkout-first`` (each run starts on the load
the one before left). Both are compiled to bytecode first, as ``pip install`` does
(without it every process would compile ddsup from source). ``--port BASE``
gives lanes fixed ports (unique across the simulated nodes); the default ``auto`` lets
each agent pick. Every process carries the bench's mark and anything left is killed and
reported.

    .venv/bin/python bench/scale_allocation.py [--nodes 128] [--gpus-per-node 8] \
        [--stagger 0s,250ms] [--baseline REV [--checkout-first]] [--port auto|BASE] [--idle 15] \
        [--churn 0.1] [--limit 900] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from side_by_side import baseline_code, baseline_env, kill_marked, marked_process, marked_processes

ROOT = Path(__file__).resolve().parents[1]
DDSUP = [sys.executable, "-m", "ddsup"]
GOALS = {
    "idle CPU of the controller ≤ 1 % of a core": ("idle_controller_pct", 1.0),
    "controller RSS ≤ 200 MiB": ("controller_rss_mib", 200.0),
    "lane ready → endpoint table p99 ≤ 100 ms (start)": ("table_p99_ms", 100.0),
    "lane ready → endpoint table p99 ≤ 100 ms (one by one)": ("trickle_table_p99_ms", 100.0),
    "ddsup status ≤ 0.5 s": ("status_s", 0.5),
    "ddsup status ≤ 0.5 s (its CPU time)": ("status_cpu_s", 0.5),
    "stop ≤ 5 s after the lanes exit": ("after_lanes_exit_s", 5.0),
    "plan + start overhead ≤ 2 s beyond the slowest lane": ("overhead_s", 2.0),
}
LANE_UNIT = """\
[unit]
type = "lane"
[service]
exec = ["{busybox}", "httpd", "-f", "-p", "{{host}}:{{port}}", "-h", "{docroot}"]
restart = "on-failure"
restart_sec = "100ms"
timeout_start = "{limit}s"
timeout_stop = "10s"
[ready]
http = "http://{{host}}:{{port}}/health"
interval = "100ms"
[lane]
model = "tiny"
gpus = 1
replicas = "auto"
port = {port}
stagger = "{stagger}"
"""
ENDPOINT_UNIT = """\
[unit]
type = "endpoint"
[endpoint]
bind = "127.0.0.1"
port = {port}
min_ready = 1
"""


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')} load {os.getloadavg()[0]:.2f}] {message}", flush=True)


def busybox() -> str:
    found = shutil.which("busybox")
    if found is None:
        log("busybox is missing: apt-get install -y busybox")
        subprocess.run(["apt-get", "install", "-y", "-q", "busybox"], check=True)
        found = shutil.which("busybox")
    if found is None:
        raise SystemExit("bench: needs busybox (apt-get install busybox)")
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


# --- watching the run -----------------------------------------------------------------
class EventTail:
    """Reads ``events.jsonl`` as it grows (a thread polling its size every 2 ms: there is
    no cheaper portable event) and stamps each line with when it was first seen."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines: list[tuple[float, dict[str, Any]]] = []
        self._offset = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._read()
            time.sleep(0.002)
        self._read()

    def _read(self) -> None:
        try:
            if os.stat(self.path).st_size <= self._offset:
                return
            with self.path.open("rb") as file:
                file.seek(self._offset)
                data = file.read()
        except FileNotFoundError:
            return
        seen = time.time()
        complete = data[: data.rfind(b"\n") + 1]
        self._offset += len(complete)
        parsed = [(seen, json.loads(line)) for line in complete.splitlines()]
        with self._lock:
            self.lines += parsed

    def events(self) -> list[tuple[float, dict[str, Any]]]:
        with self._lock:
            return list(self.lines)

    def transitions(self, to: str) -> list[tuple[float, dict[str, Any]]]:
        return [(s, e) for s, e in self.events() if e.get("event") == "unit" and e["to"] == to]

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


@dataclass
class Procs:
    """ddsup's processes and the lanes, found under the controller (and the sentinels)."""

    controller: psutil.Process
    agents: list[psutil.Process] = field(default_factory=list)
    sentinels: list[psutil.Process] = field(default_factory=list)
    endpoint: list[psutil.Process] = field(default_factory=list)
    lanes: list[psutil.Process] = field(default_factory=list)

    @classmethod
    def find(cls, pid: int) -> Procs:
        found = cls(psutil.Process(pid))
        for proc in found.controller.children(recursive=True):
            with suppress(psutil.Error):
                argv = proc.cmdline()
                if "agent" in argv[:4]:
                    found.agents.append(proc)
                elif "endpoint" in argv[:4]:
                    found.endpoint.append(proc)
                elif "httpd" in argv[:2]:
                    found.lanes.append(proc)
        for proc in marked_processes():  # sentinels run in their own sessions
            with suppress(psutil.Error):
                if any(a.endswith("_sentinel.py") for a in proc.cmdline()):
                    found.sentinels.append(proc)
        return found

    def ddsup_count(self) -> int:
        return 1 + len(self.agents) + len(self.sentinels) + len(self.endpoint)


def cpu_s(procs: Iterable[psutil.Process]) -> float:
    total = 0.0
    for proc in procs:
        with suppress(psutil.Error):
            times = proc.cpu_times()
            total += times.user + times.system
    return total


def reaped_cpu_s(proc: psutil.Process) -> float:
    """CPU of ``proc``'s children that it has reaped (0 when it is gone)."""
    with suppress(psutil.Error):
        times = proc.cpu_times()
        return times.children_user + times.children_system
    return 0.0


def loop_waits(proc: psutil.Process) -> tuple[float, int]:
    """(seconds runnable but waiting for a CPU, times preempted) of ``proc``'s main
    thread (the controller's event loop) so far: the regime beside a latency figure. A
    loop that waits for a CPU delays every event it has not handled yet, whatever its
    code costs (``/proc/PID/schedstat``: on-CPU, run-queue wait, slices)."""
    with suppress(OSError, ValueError, IndexError):
        waited = int(Path(f"/proc/{proc.pid}/schedstat").read_text().split()[1]) / 1e9
        return waited, proc.num_ctx_switches().involuntary
    return float("nan"), -1


def rss_mib(procs: Iterable[psutil.Process]) -> list[float]:
    out = []
    for proc in procs:
        with suppress(psutil.Error):
            out.append(proc.memory_info().rss / 2**20)
    return out


def pss_mib(procs: Iterable[psutil.Process]) -> float:
    total = 0
    for proc in procs:
        with suppress(psutil.Error):
            total += proc.memory_full_info().pss
    return total / 2**20


def wait_for(condition: Any, limit: float, what: str, process: subprocess.Popen[bytes]) -> None:
    """Bounded poll (there is no event for these from outside the run)."""
    deadline = time.monotonic() + limit
    while not condition():
        if process.poll() is not None:
            raise SystemExit(f"bench: ddsup start exited with {process.returncode} ({what})")
        if time.monotonic() > deadline:
            raise SystemExit(f"bench: {what} not within {limit:g} s")
        time.sleep(0.05)


# --- one run --------------------------------------------------------------------------
@dataclass
class Run:
    work: Path
    nodes: int
    gpus: int
    stagger: str
    limit: float
    port: str  # "auto" or a base port
    code: Path | None  # ddsup's source for PYTHONPATH (a baseline), None: this checkout
    result: dict[str, float] = field(default_factory=dict)

    @property
    def lanes(self) -> int:
        return self.nodes * self.gpus

    @property
    def env(self) -> dict[str, str]:
        return {} if self.code is None else baseline_env(self.code)

    def write_units(self, box: str) -> Path:
        units, docroot = self.work / "units", self.work / "docroot"
        units.mkdir(parents=True)
        docroot.mkdir()
        (docroot / "health").write_text("ok\n")
        (docroot / "metrics").write_text('vllm:num_requests_waiting{model_name="tiny"} 0\n')
        port = '"auto"' if self.port == "auto" else self.port
        lane = LANE_UNIT.format(
            busybox=box, docroot=docroot, limit=int(self.limit), stagger=self.stagger, port=port
        )
        (units / "lane@.toml").write_text(lane)
        (units / "endpoint.toml").write_text(ENDPOINT_UNIT.format(port=free_port()))
        return units

    def argv(self, units: Path) -> list[str]:
        start = ["start", str(units), "--state-dir", str(self.state), "-q"]
        return [*DDSUP, *start, "--nodes", str(self.nodes), "--gpus-per-node", str(self.gpus)]

    @property
    def state(self) -> Path:
        return self.work / "state"

    def put(self, key: str, value: float) -> None:
        self.result[key] = round(value, 6)


def in_table(added: dict[str, list[float]], instance: str, ready: float) -> float | None:
    """When ``instance`` entered the subscriber's table after its ready at ``ready`` (the
    first entry from then on, 1 ms of clock skew allowed), None: it never did."""
    later = [t for t in added.get(instance, []) if t >= ready - 0.001]
    return min(later, default=None)


def feed_latencies(
    tail: EventTail, added: dict[str, list[float]], since: float = 0.0, until: float = 1e12
) -> tuple[list[float], list[float]]:
    """(ready event → line seen, ready event → in the table), seconds, for readies from
    ``since`` to ``until``: each ready is matched to the first table entry after it."""
    to_line, to_table = [], []
    for seen, event in tail.transitions("ready"):
        at = float(event["time"])
        if not since <= at < until:
            continue
        to_line.append(seen - at)
        entered = in_table(added, event["instance"], at)
        if entered is not None:
            to_table.append(entered - at)
    return to_line, to_table


def measure_start(run: Run, tail: EventTail, spawned: float, procs: Procs) -> None:
    events = [e for _s, e in tail.events()]
    start = next(float(e["time"]) for e in events if e.get("reason") == "starting")
    ready = {e["instance"]: float(e["time"]) for e in events if e.get("to") == "ready"}
    lanes = {i: t for i, t in ready.items() if i.startswith("lane@")}
    starting: dict[str, float] = {}
    for e in events:
        if e.get("to") == "starting" and e["instance"] in lanes:
            starting.setdefault(e["instance"], float(e["time"]))
    first_by_node: dict[str, float] = {}
    for e in events:
        if e.get("event") == "unit" and str(e["instance"]).startswith("lane@"):
            first_by_node.setdefault(e["node"], float(e["time"]))
    own = [lanes[i] - starting[i] for i in lanes]
    last = max(lanes.values())
    run.put("to_run_starting_s", start - spawned)
    run.put("to_last_agent_first_event_s", max(first_by_node.values()) - spawned)
    run.put("to_first_lane_ready_s", min(lanes.values()) - spawned)
    run.put("to_all_ready_s", last - spawned)
    run.put("slowest_lane_own_s", max(own))
    last_lane = max(lanes, key=lambda i: lanes[i])
    run.put("overhead_s", last - spawned - max(own) - stagger_of(last_lane, events))
    run.put("controller_cpu_to_ready_s", cpu_s([procs.controller]))
    waited, preempted = loop_waits(procs.controller)
    run.put("controller_cpu_wait_to_ready_s", waited)
    run.put("controller_preempted_to_ready", preempted)
    # children the controller has reaped: the local agents' forker, which has exited
    run.put("reaped_cpu_to_ready_s", reaped_cpu_s(procs.controller))
    run.put("agents_cpu_to_ready_s", cpu_s(procs.agents))
    run.put("sentinels_cpu_to_ready_s", cpu_s(procs.sentinels))
    run.put("lanes_cpu_to_ready_s", cpu_s(procs.lanes))
    run.put("endpoint_cpu_to_ready_s", cpu_s(procs.endpoint))  # from its start, with the joins
    run.put("events_to_ready", len(events))


def stagger_of(instance: str, events: list[dict[str, Any]]) -> float:
    """How long ``instance`` waited in ``waiting`` (its planned stagger) before starting."""
    waits = [e for e in events if e.get("instance") == instance and e.get("to") == "waiting"]
    starts = [e for e in events if e.get("instance") == instance and e.get("to") == "starting"]
    if not waits or not starts:
        return 0.0
    return float(starts[0]["time"]) - float(waits[0]["time"])


def measure_memory(run: Run, procs: Procs) -> None:
    agents = rss_mib(procs.agents)
    run.put("controller_rss_mib", rss_mib([procs.controller])[0])
    run.put("agent_rss_mib_median", statistics.median(agents) if agents else 0.0)
    run.put("agent_rss_mib_max", max(agents, default=0.0))
    run.put("agents_rss_mib_total", sum(agents))
    run.put("agents_pss_mib_total", pss_mib(procs.agents))
    run.put("sentinels", len(procs.sentinels))
    run.put("sentinels_rss_mib_total", sum(rss_mib(procs.sentinels)))
    run.put("endpoint_rss_mib", sum(rss_mib(procs.endpoint)))
    run.put("lanes_running", len(procs.lanes))
    run.put("lanes_rss_mib_total", sum(rss_mib(procs.lanes)))
    run.put("ddsup_processes", procs.ddsup_count())
    pid = procs.controller.pid
    run.put("controller_fds", len(os.listdir(f"/proc/{pid}/fd")))
    run.put("controller_threads", procs.controller.num_threads())
    run.put("controller_children", len(procs.controller.children()))


def measure_idle(run: Run, procs: Procs, seconds: float) -> None:
    groups = {"controller": [procs.controller], "agents": procs.agents}
    groups["sentinels"] = procs.sentinels
    groups["endpoint"] = procs.endpoint
    before = {name: cpu_s(group) for name, group in groups.items()}
    time.sleep(seconds)  # the measurement window itself, not a synchronisation
    for name, group in groups.items():
        run.put(f"idle_{name}_pct", 100 * (cpu_s(group) - before[name]) / seconds)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(argv: list[str], env: dict[str, str], reps: int) -> tuple[float, float, int]:
    """Median wall and CPU seconds of ``argv`` as a command, and its output's size."""
    walls, cpus, size = [], [], 0
    for _ in range(reps):
        cpu, began = children_cpu(), time.perf_counter()
        out = subprocess.run(argv, capture_output=True, check=True, env=env).stdout
        walls.append(time.perf_counter() - began)
        cpus.append(children_cpu() - cpu)
        size = len(out)
    return statistics.median(walls), statistics.median(cpus), size


def measure_status(run: Run, reps: int = 5) -> None:
    """``ddsup status`` (and ``--json``) of the live run, and the floor of any command."""
    env = {**os.environ, **run.env}
    status = [*DDSUP, "status", "--state-dir", str(run.state)]
    for name, argv in (("status", status), ("status_json", [*status, "--json"])):
        wall, cpu, size = timed(argv, env, reps)
        run.put(f"{name}_s", wall)
        run.put(f"{name}_cpu_s", cpu)
        run.put(f"{name}_bytes", size)
    wall, cpu, _size = timed([*DDSUP, "--version"], env, reps)
    run.put("ddsup_version_floor_s", wall)
    run.put("ddsup_version_floor_cpu_s", cpu)


def measure_trickle(
    run: Run, procs: Procs, tail: EventTail, count: int, process: subprocess.Popen[bytes]
) -> tuple[float, float]:
    """SIGKILL ``count`` lanes one at a time, 0.25 s apart, each on another node (lanes
    crash one by one in a real run): the latencies of their ready events, without the
    burst of the churn. Returns the window of their ready events."""
    step = max(1, len(procs.lanes) // count)
    victims = procs.lanes[::step][:count]
    readies = len(tail.transitions("ready"))
    began = time.time()
    for proc in victims:
        with suppress(psutil.Error):
            proc.kill()
        time.sleep(0.25)  # the pace of the crashes, not a synchronisation
    wanted = readies + len(victims)
    wait_for(lambda: len(tail.transitions("ready")) >= wanted, 120, "trickle: all ready", process)
    time.sleep(0.5)  # the last one's way to the table
    run.put("trickle_lanes_killed", len(victims))
    return began, time.time()


def measure_churn(
    run: Run, procs: Procs, tail: EventTail, share: float, process: subprocess.Popen[bytes]
) -> float:
    """SIGKILL a share of the lanes at once; until all are ready again. Returns the kill time."""
    victims = procs.lanes[:: max(1, round(1 / share))]
    readies = len(tail.transitions("ready"))
    events_before = len(tail.events())
    cpu_before = cpu_s([procs.controller])
    killed = time.time()
    for proc in victims:
        with suppress(psutil.Error):
            proc.kill()
    wanted = readies + len(victims)
    wait_for(lambda: len(tail.transitions("ready")) >= wanted, 120, "churn: all ready", process)
    done = max(float(e["time"]) for _s, e in tail.transitions("ready"))
    time.sleep(1.0)  # let the last events' handling finish before reading the CPU
    events = len(tail.events()) - events_before
    run.put("churn_lanes_killed", len(victims))
    run.put("churn_to_all_ready_s", done - killed)
    run.put("churn_events", events)
    run.put("churn_controller_cpu_s", cpu_s([procs.controller]) - cpu_before)
    run.put("churn_controller_us_per_event", 1e6 * run.result["churn_controller_cpu_s"] / events)
    return killed


def measure_stop(run: Run, tail: EventTail, process: subprocess.Popen[bytes]) -> None:
    began = time.time()
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=300)
    ended = time.time()
    tail.close()
    exits = [float(e["time"]) for _s, e in tail.transitions("exited")]
    lanes_exited = max(exits, default=began)
    run.put("stop_s", ended - began)
    run.put("stop_to_last_exited_s", lanes_exited - began)
    run.put("after_lanes_exit_s", ended - lanes_exited)
    run.put("exit_status", process.returncode)


def run_variant(run: Run, args: argparse.Namespace, full: bool, name: str) -> dict[str, float]:
    units = run.write_units(busybox())
    tail = EventTail(run.state / "events.jsonl")
    feed_out = run.work / "feed.json"
    spawned = time.time()
    output = run.work / "output"
    with marked_process(
        run.argv(units),
        output,
        stop_timeout=120,
        env=run.env,
        session=True,
    ) as process:
        wait_for(lambda: (run.state / "control.secret").exists(), 60, "control channel", process)
        watcher = subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / "feed_watch.py"), str(run.state), str(feed_out)],
            cwd=ROOT,
            env={**os.environ, **run.env},
            start_new_session=True,  # a session of its own, as the endpoint has
        )
        try:
            lanes = run.lanes
            wait_for(
                lambda: len(tail.transitions("ready")) >= lanes + 1,
                run.limit,
                f"{lanes} lanes and the endpoint ready",
                process,
            )
            procs = Procs.find(process.pid)
            measure_start(run, tail, spawned, procs)
            log(f"all ready after {run.result['to_all_ready_s']:.2f} s")
            measure_memory(run, procs)
            killed, trickle = 0.0, (0.0, 0.0)
            if full:
                time.sleep(2.0)  # settle: the last events' handling, the endpoint's start
                measure_idle(run, procs, args.idle)
                measure_status(run)
                trickle = measure_trickle(run, procs, tail, args.trickle, process)
                killed = measure_churn(run, Procs.find(process.pid), tail, args.churn, process)
            measure_stop(run, tail, process)
        finally:
            watcher.wait(timeout=60)
    feed = json.loads(feed_out.read_text()) if feed_out.exists() else {"added": {}}
    to_line, to_table = feed_latencies(tail, feed["added"], since=feed.get("subscribed", 0.0))
    run.put("line_p50_ms", 1000 * percentile(to_line, 0.5))
    run.put("line_p99_ms", 1000 * percentile(to_line, 0.99))
    run.put("table_p50_ms", 1000 * percentile(to_table, 0.5))
    run.put("table_p99_ms", 1000 * percentile(to_table, 0.99))
    run.put("table_max_ms", 1000 * max(to_table, default=float("nan")))
    run.put("table_lanes_seen", len(to_table))
    run.put("feed_updates", feed.get("updates", 0))
    if args.readies is not None:
        write_readies(args.readies, name, tail, feed["added"], feed.get("subscribed", 0.0))
    run.put("feed_subscriber_cpu_s", feed.get("cpu_s", float("nan")))
    if full and killed:
        line, table = feed_latencies(tail, feed["added"], *trickle)
        run.put("trickle_line_p50_ms", 1000 * percentile(line, 0.5))
        run.put("trickle_line_p99_ms", 1000 * percentile(line, 0.99))
        run.put("trickle_table_p50_ms", 1000 * percentile(table, 0.5))
        run.put("trickle_table_p99_ms", 1000 * percentile(table, 0.99))
        _line, churn_table = feed_latencies(tail, feed["added"], since=killed)
        run.put("churn_table_p99_ms", 1000 * percentile(churn_table, 0.99))
    return run.result


def write_readies(
    path: Path, variant: str, tail: EventTail, added: dict[str, list[float]], since: float
) -> None:
    """One JSON line per ready, appended to ``path``: when its agent stamped it, when
    the line was seen in ``events.jsonl`` and when the lane was in the table (null: never),
    to look at a run's tail (which lanes, when, which hop). Only the readies after the
    subscriber subscribed (``since``), as the latency figures count them: an earlier one
    enters the table with the first snapshot, however late that is."""
    with path.open("a") as out:
        for seen, event in tail.transitions("ready"):
            at = float(event["time"])
            if at >= since:
                row = [variant, event["instance"], at, seen, in_table(added, event["instance"], at)]
                out.write(json.dumps(row) + "\n")


# --- main ---------------------------------------------------------------------------
def cool_down(limit: float, below: float = 6.0) -> None:
    """Until the load average the previous run left behind (128 agents starting drive it
    to ~90) is below ``below``, or ``limit`` seconds: the next run starts on an equal
    footing. A poll: the load average has no event."""
    deadline = time.monotonic() + limit
    while os.getloadavg()[0] > below and time.monotonic() < deadline:
        time.sleep(5)


def compile_bytecode(trees: Iterable[Path]) -> None:
    """What ``pip install`` does: without it every process compiles ddsup from source."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    for tree in trees:
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree)], env=env, check=True)


def print_report(
    results: dict[str, dict[str, float]], loads: dict[str, tuple[float, float]]
) -> None:
    print(f"\nmachine: {os.cpu_count()} CPUs, {psutil.virtual_memory().total / 2**30:.1f} GiB")
    names = list(results)
    keys = list(dict.fromkeys(k for r in results.values() for k in r))
    print(f"{'':<34}" + "".join(f"{n:>18}" for n in names))
    print(
        f"{'load at start / end':<34}"
        + "".join(f"{loads[n][0]:>11.1f} /{loads[n][1]:>5.1f}" for n in names)
    )
    for key in keys:
        cells = "".join(f"{results[n].get(key, float('nan')):>18.3f}" for n in names)
        print(f"{key:<34}{cells}")
    print()
    for goal, (key, limit) in GOALS.items():
        marks: list[str] = []
        for name in names:
            value = results[name].get(key)
            if value is not None:
                marks.append(f"{name}: {value:.3f} {'met' if value <= limit else 'MISSED'}")
        print(f"{goal:<54} " + " · ".join(marks))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, default=128)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--stagger", default="0s,250ms", help="variants, comma-separated")
    parser.add_argument("--idle", type=float, default=15.0, help="seconds of the idle window")
    parser.add_argument("--churn", type=float, default=0.1, help="share of lanes killed")
    parser.add_argument("--trickle", type=int, default=32, help="lanes killed one at a time")
    parser.add_argument("--cool", type=float, default=300.0, help="most seconds between runs")
    parser.add_argument("--limit", type=float, default=900.0, help="seconds to all ready")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--readies", type=Path, help="append each ready's times here (JSON lines)")
    parser.add_argument(
        "--checkout-first",
        action="store_true",
        help="run this checkout before the baseline (the second run starts on the load the first left)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the state directories")
    parser.add_argument(
        "--baseline",
        metavar="REV",
        help="also run ddsup as of this revision (or from this directory of its source)",
    )
    parser.add_argument("--port", default="auto", help='lanes\' ports: "auto" or a base port')
    args = parser.parse_args()
    results: dict[str, dict[str, float]] = {}
    loads: dict[str, tuple[float, float]] = {}
    work = Path(tempfile.mkdtemp(prefix="ddsup-scale-alloc-"))
    codes: list[tuple[str, Path | None]] = [("checkout", None)]
    if args.baseline:
        baseline = (args.baseline, baseline_code(args.baseline, work / "baseline"))
        codes.insert(len(codes) if args.checkout_first else 0, baseline)
    compile_bytecode(code or ROOT / "supervisor" for _name, code in codes)
    try:
        for index, stagger in enumerate(args.stagger.split(",")):
            for code_name, code in codes:
                name = f"{code_name} {stagger}" if args.baseline else f"stagger {stagger}"
                if results:
                    cool_down(args.cool)
                log(f"{name}: {args.nodes} nodes × {args.gpus_per_node} lanes")
                load = os.getloadavg()[0]
                run = Run(
                    work / f"run{len(results)}",
                    args.nodes,
                    args.gpus_per_node,
                    stagger,
                    args.limit,
                    args.port,
                    code,
                )
                results[name] = run_variant(run, args, full=index == 0, name=name)
                loads[name] = (load, os.getloadavg()[0])
    finally:
        left = kill_marked()
        if left:
            print(f"LEFTOVER: {left} processes", file=sys.stderr)
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print_report(results, loads)
    if args.json:
        args.json.write_text(json.dumps({"loads": loads, "results": results}, indent=1))


if __name__ == "__main__":
    main()
