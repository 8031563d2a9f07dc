"""Run one chaos schedule against a real ``ddsup start`` and judge what it left behind.

The harness launches ``ddsup start`` on the schedule's unit files inside a PID namespace
of its own, whose PID 1 is the orphan oracle (``support.pid_namespace``), tails
``events.jsonl`` (a bounded poll: a file has no change event) to recognise the phases of
the run, sends each injection, in the schedule's order, the moment its phase is reached
and its target runs, and then checks ddsup's promises (docs/cli.md's exit statuses,
docs/no-orphans.md): the schedule's own exit status and ``result.json`` status, a
well-formed ``result.json`` and ``events.jsonl``, every injection fired, no run past its
bound, and nothing left in the namespace when ``ddsup start`` has returned
(``ORPHAN_GRACE_KILLED`` after a SIGKILL of ``ddsup start``), counted by the oracle
without ddsup's tag, cgroups or records.

It only ever signals ``ddsup start`` and processes of the namespace that carry the run's
invocation id, and whatever happens the namespace ends (with every process in it) before
the harness returns.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos_schedule import Injection, LaneKind, Phase, Schedule, WorkerKind, lane_nodes

from support.pid_namespace import Namespace, oracle_argv, read_report

ORPHAN_GRACE_KILLED = 2.0  # after SIGKILL of ddsup start (the sentinel's sweep); else zero grace
STOP_BOUND = 6.0  # seconds from the cause of the end to the exit of ddsup start
REENTRY_BOUND = 4.0  # seconds from a second stop signal to the exit (SIGKILL everything)
POLL = 0.01  # seconds between looks at events.jsonl and /proc


# --- processes of a run ---------------------------------------------------------------


def _environ(pid: int) -> dict[bytes, bytes]:
    try:
        data = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.partition(b"=")[::2] for item in data.split(b"\0") if item)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


def run_processes(invocation_id: str) -> dict[int, str]:
    """Live (non-zombie) processes carrying ``DDSUP_INVOCATION_ID=invocation_id``: cmdlines."""
    wanted = invocation_id.encode()
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        if _environ(pid).get(b"DDSUP_INVOCATION_ID") == wanted and _alive(pid):
            found[pid] = _cmdline(pid)
    return found


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return " ".join(part.decode(errors="replace") for part in raw.split(b"\0") if part)


def agent_pids(invocation_id: str, parent: int) -> dict[str, int]:
    """Node → PID of the run's ``ddsup agent --node NODE`` processes that are up.

    Only children of ``ddsup start`` (``parent``) count: a unit process the agent has
    forked but not yet exec'd still shows the agent's command line and environment.
    """
    found = {}
    for pid, cmdline in run_processes(invocation_id).items():
        words = cmdline.split()
        if "agent" in words and "--node" in words[:-1] and _parent(pid) == parent:
            found[words[words.index("--node") + 1]] = pid
    return found


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


# --- what the run wrote ---------------------------------------------------------------


@dataclass
class EventTail:
    """Reads ``events.jsonl`` as it grows; complete lines only; malformed lines are kept
    as problems (every line must be one JSON object with a float ``time`` and ``event``)."""

    path: Path
    events: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    _offset: int = 0
    _buffer: bytes = b""

    def poll(self) -> None:
        try:
            with self.path.open("rb") as handle:
                handle.seek(self._offset)
                data = handle.read()
        except FileNotFoundError:
            return
        self._offset += len(data)
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            self._add(line)

    def finish(self) -> None:
        self.poll()
        if self._buffer:
            self.problems.append(f"events.jsonl ends without a newline: {self._buffer[:200]!r}")

    def _add(self, line: bytes) -> None:
        number = len(self.events) + len(self.problems) + 1
        try:
            event = json.loads(line)
        except ValueError:
            self.problems.append(f"events.jsonl:{number}: not JSON: {line[:200]!r}")
            return
        if (
            not isinstance(event, dict)
            or not isinstance(event.get("time"), float)
            or not isinstance(event.get("event"), str)
        ):
            self.problems.append(f"events.jsonl:{number}: no float time/str event: {line[:200]!r}")
            return
        self.events.append(event)


@dataclass
class RunView:
    """What the events say so far: lane/worker states, their PIDs, the run's own steps."""

    ever_ready: set[str] = field(default_factory=set)
    state: dict[str, str] = field(default_factory=dict)
    pid: dict[str, int] = field(default_factory=dict)
    run_steps: list[str] = field(default_factory=list)
    seen: int = 0

    def update(self, events: list[dict[str, Any]]) -> None:
        for event in events[self.seen :]:
            instance = event.get("instance")
            if event["event"] == "run":
                self.run_steps.append(str(event.get("reason")))
            elif event["event"] == "process" and instance and isinstance(event.get("pid"), int):
                self.pid[instance] = event["pid"]
            elif event["event"] == "unit" and instance:
                self.state[instance] = str(event.get("to"))
                if event.get("to") == "ready":
                    self.ever_ready.add(instance)
        self.seen = len(events)


@dataclass
class Figures:
    """What the schedules of this session found (filled by the tests, printed at the end)."""

    seed: int | None = None
    run: int = 0
    orphans: int = 0
    wrong_exit: int = 0
    wrong_status: int = 0
    hangs: int = 0
    not_fired: int = 0
    bad: list[str] = field(default_factory=list)
    emptied: list[float] = field(default_factory=list)  # after SIGKILL of ddsup start

    def line(self) -> str:
        seed = "" if self.seed is None else f"seed {self.seed}, "
        return (
            f"chaos: {seed}schedules run {self.run}, orphans found {self.orphans}, "
            f"wrong exit codes {self.wrong_exit}, wrong statuses {self.wrong_status}, "
            f"hangs {self.hangs}, injections not fired {self.not_fired}"
        )

    def kill_line(self) -> str | None:
        """How long the namespace took to empty after SIGKILL of ddsup start."""
        if not self.emptied:
            return None
        ordered = sorted(self.emptied)
        return (
            f"chaos: after SIGKILL of ddsup start ({len(ordered)} schedules) nothing was left"
            f" within {ordered[-1]:.3f}s at most (median {ordered[len(ordered) // 2]:.3f}s;"
            f" bound {ORPHAN_GRACE_KILLED:g}s)"
        )


# --- one run --------------------------------------------------------------------------


@dataclass
class Outcome:
    """The verdict on one schedule."""

    schedule: Schedule
    returncode: int | None = None
    hang: bool = False
    orphans: dict[int, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    fired: list[str] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)
    status: str | None = None  # result.json's
    seconds: float = 0.0
    empty_after: float | None = None  # seconds from the exit until the namespace was empty
    stop_seconds: float | None = None  # from the cause of the end to the exit
    reentry_seconds: float | None = None  # from the second stop signal to the exit

    @property
    def slow_stop(self) -> bool:
        """The stop took longer than its bound: a hang, though not past the hard bound."""
        slow = self.stop_seconds is not None and self.stop_seconds > STOP_BOUND
        return slow or (self.reentry_seconds is not None and self.reentry_seconds > REENTRY_BOUND)

    @property
    def wrong_exit(self) -> bool:
        return not self.hang and self.returncode not in self.schedule.allowed()

    @property
    def wrong_status(self) -> bool:
        """result.json's status is not the one the schedule demands for this exit."""
        allowed = self.schedule.allowed()
        return (
            not self.hang and self.returncode in allowed and allowed[self.returncode] != self.status
        )

    def report(self, state: Path) -> str:
        lines = [
            self.schedule.describe(),
            f"ddsup start: exit {self.returncode}, result.json status {self.status!r}",
        ]
        if self.empty_after is not None:
            lines.append(f"namespace empty {self.empty_after:.3f}s after ddsup start exited")
        lines += [f"fired: {f}" for f in self.fired] + [f"missed: {m}" for m in self.missed]
        if self.stop_seconds is not None:
            lines.append(f"stop took {self.stop_seconds:.2f}s (bound {STOP_BOUND:g}s)")
        if self.reentry_seconds is not None:
            lines.append(
                f"exit {self.reentry_seconds:.2f}s after the second stop signal"
                f" (bound {REENTRY_BOUND:g}s)"
            )
        if self.hang:
            lines.append(f"HANG: still running after {self.schedule.bound:g}s")
        lines += [f"ORPHAN {pid}: {cmd}" for pid, cmd in sorted(self.orphans.items())]
        lines += [f"PROBLEM: {p}" for p in self.problems]
        lines.append(f"state dir: {state} (output of ddsup start: {state.parent / 'output.log'})")
        return "\n".join(lines)


class ChaosRun:
    """One schedule: write units, start in a PID namespace, inject, wait, check."""

    def __init__(
        self,
        schedule: Schedule,
        workdir: Path,
        *,
        before_fire: Callable[[ChaosRun, Injection], bool] | None = None,
    ) -> None:
        self.schedule = schedule
        self.before_fire = before_fire
        self.units = workdir / "units"
        self.state = workdir / "state"
        self.output = workdir / "output.log"
        self.oracle = workdir / "oracle.json"
        self.tail = EventTail(self.state / "events.jsonl")
        self.view = RunView()
        self.outcome = Outcome(schedule)
        self.invocation_id: str | None = None
        self.started_at = 0.0
        self.fired_at: dict[str, float] = {}
        self._agents_seen = False
        self.namespace: Namespace | None = None
        self.start_pid = 0  # ddsup start, as the host sees it
        self.exited_wall = 0.0

    def run(self) -> Outcome:
        write_units(self.units, self.schedule.unit_files())
        grace = 0.0 if self.schedule.expected_status is not None else ORPHAN_GRACE_KILLED
        self.started_at = time.monotonic()
        with self.output.open("wb") as output:
            process = subprocess.Popen(
                oracle_argv(self.oracle, grace, self._argv()),
                env=start_env(),
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=output,
            )
        try:
            self.namespace = Namespace.of(process)
            self.start_pid = self.namespace.start
            self._drive()
            self._judge(process, grace)
        finally:
            if process.poll() is None:
                process.kill()  # unshare --kill-child: the namespace goes with it
            process.wait()
            if self.namespace is not None:
                self.namespace.close()
        self.outcome.seconds = time.monotonic() - self.started_at
        self._check_artefacts()
        self._check_stop_time()
        return self.outcome

    def _argv(self) -> list[str]:
        sched = self.schedule
        return [
            *(sys.executable, "-m", "ddsup", "start", str(self.units)),
            *("--state-dir", str(self.state), "--launcher", "local", "-v"),
            *("--nodes", str(sched.nodes), "--gpus-per-node", str(sched.gpus_per_node)),
        ]

    # --- driving ----------------------------------------------------------------------
    def _drive(self) -> None:
        """Fire the injections in order until ddsup start exits (or its bound passes)."""
        assert self.namespace is not None
        pending = list(self.schedule.injections)
        deadline = self.started_at + self.schedule.bound
        while not self.namespace.start_exited():
            if time.monotonic() > deadline:
                self.outcome.hang = True
                self.namespace.signal_start(signal.SIGKILL)
                self.namespace.wait_start()
                break
            self._look()
            pending = self._fire_due(pending)
            time.sleep(POLL)
        self.exited_wall = time.time()
        self.outcome.missed += [
            i.describe() for i in pending if not (i.role == "storm" and "reentry" in self.fired_at)
        ]

    def _fire_due(self, pending: list[Injection]) -> list[Injection]:
        """Fire what is due, strictly in the schedule's order (an injection waits for the
        ones before it); a storm that fired repeats until the end without blocking."""
        left = []
        blocked = False
        for injection in pending:
            repeating = injection.role == "storm" and "reentry" in self.fired_at
            if repeating:
                self._try_fire(injection)
                left.append(injection)
            elif blocked or not self._try_fire(injection):
                blocked = True
                left.append(injection)
        return left

    def _look(self) -> None:
        if self.invocation_id is None:
            self.invocation_id = read_invocation_id(self.state)
        self.tail.poll()
        self.view.update(self.tail.events)

    def _try_fire(self, injection: Injection) -> bool:
        """Fire ``injection`` if its phase is reached and its target runs; True if fired."""
        assert self.namespace is not None
        if self.invocation_id is None or not self._reached(injection):
            return False
        if (
            injection.role == "primary"
            and self.before_fire
            and not self.before_fire(self, injection)
        ):
            return False
        pid = self._resolve(injection.target)
        if pid is None:
            return False
        try:
            if pid == self.start_pid:
                self.namespace.signal_start(injection.signum)  # through a pidfd: never a stranger
            else:
                os.kill(pid, injection.signum)
        except ProcessLookupError:
            return False
        key = "reentry" if injection.role == "storm" else injection.role
        first = key not in self.fired_at
        self.fired_at.setdefault(key, time.time())
        if first or injection.role != "storm":
            elapsed = time.monotonic() - self.started_at
            self.outcome.fired.append(f"{injection.describe()} (pid {pid}, t+{elapsed:.2f}s)")
        return True

    def _resolve(self, target: str) -> int | None:
        """The host PID of a target that runs now, or None."""
        assert self.invocation_id is not None and self.namespace is not None
        if target == "start":
            return self.start_pid
        if target.startswith("agent:"):
            nodes = agent_pids(self.invocation_id, self.start_pid)
            return nodes.get(target.split(":", 1)[1])
        instance = "worker" if target == "worker" else target.split(":", 1)[1]
        ns_pid = self.view.pid.get(instance)  # events name PIDs as the namespace sees them
        if ns_pid is None or self.view.state.get(instance) not in ("starting", "ready"):
            return None
        pid = self.namespace.host_pid(ns_pid)
        if pid is None:
            return None
        own = _environ(pid).get(b"DDSUP_INVOCATION_ID") == self.invocation_id.encode()
        return pid if own and _alive(pid) else None  # never signal a recycled PID

    def _reached(self, injection: Injection) -> bool:
        if injection.phase is Phase.READINESS_WAIT and injection.target.startswith("lane:"):
            return injection.target.split(":", 1)[1] in self.view.pid  # the target's own start
        phase = self._phase()
        return phase is not None and phase >= injection.phase

    def _phase(self) -> Phase | None:
        """The furthest phase the run has reached (phases are passed in order)."""
        view, sched = self.view, self.schedule
        if "stopping" in view.run_steps:
            return Phase.STOPPING
        healthy = sched.lane_instances(healthy_only=True)
        worker_up = sched.worker.kind is WorkerKind.NONE or "worker" in view.pid
        if set(healthy) <= view.ever_ready and worker_up:
            return Phase.RUNNING
        lanes = sched.lane_instances()
        slow = [i for u in sched.lanes if u.kind is LaneKind.SLOW for i in u.instances()]
        if any(i in view.pid for i in slow):
            return Phase.READINESS_WAIT
        started = [i for i in lanes if view.state.get(i, "waiting") != "waiting"]
        waiting = [i for i in lanes if view.state.get(i) == "waiting"]
        if started and (waiting or len(started) == len(lanes)):
            return Phase.MID_STAGGER
        if started:
            return Phase.FIRST_STARTING
        if view.state or self._agents_up():
            return Phase.PREFLIGHT
        return None

    def _agents_up(self) -> bool:
        """Whether every node agent of the run is up (they then run preflight)."""
        if not self._agents_seen and self.invocation_id is not None:
            up = len(agent_pids(self.invocation_id, self.start_pid))
            self._agents_seen = up >= lane_nodes(self.schedule)
        return self._agents_seen

    # --- after the end ----------------------------------------------------------------
    def _judge(self, process: subprocess.Popen[bytes], grace: float) -> None:
        """The oracle's verdict: ddsup start's exit status and what was left."""
        try:
            process.wait(timeout=grace + 10.0)
        except subprocess.TimeoutExpired:
            self.outcome.problems.append("the orphan oracle did not report")
            return
        try:
            report = read_report(self.oracle)
        except (OSError, ValueError, KeyError) as err:
            self.outcome.problems.append(f"the orphan oracle did not report: {err}")
            return
        self.outcome.returncode = report.returncode
        self.outcome.orphans = report.leftovers
        self.outcome.empty_after = report.empty_after
        if self.invocation_id is None:
            self._look()

    def _check_artefacts(self) -> None:
        self.tail.finish()
        self.outcome.problems += self.tail.problems
        self.outcome.problems += [f"injection did not fire: {m}" for m in self.outcome.missed]
        sched = self.schedule
        if self.outcome.hang:
            return
        if sched.expected_status is None:
            return  # ddsup start was SIGKILLed: no result.json is promised
        self.outcome.status, problems = check_result(self.state, self.outcome.returncode)
        self.outcome.problems += problems
        self.outcome.problems += check_events(self.tail.events, self.state)

    def _check_stop_time(self) -> None:
        """From the cause of the end to the exit of ddsup start, and from a second stop
        signal to the exit, within bounds (``timeout_stop`` ≤ 1 s in every schedule)."""
        if self.outcome.hang or self.schedule.expected_status is None:
            return
        ending = [e["time"] for e in self.tail.events if e.get("reason") == "ending"]
        cause = self.fired_at.get("primary", ending[0] if ending else None)
        if cause is not None:
            self.outcome.stop_seconds = self.exited_wall - cause
        if "reentry" in self.fired_at:
            self.outcome.reentry_seconds = self.exited_wall - self.fired_at["reentry"]


def read_invocation_id(state: Path) -> str | None:
    try:
        data = json.loads((state / "run.json").read_text())
    except (OSError, ValueError):
        return None
    value = data.get("invocation_id") if isinstance(data, dict) else None
    return value if isinstance(value, str) and value else None


def check_result(state: Path, returncode: int | None) -> tuple[str | None, list[str]]:
    """``result.json``: its status, and whether it is well-formed and agrees with the exit
    status (the schedule, not this function, says which status is right)."""
    try:
        result = json.loads((state / "result.json").read_text())
    except FileNotFoundError:
        return None, ["no result.json"]
    except ValueError as err:
        return None, [f"result.json is not JSON: {err}"]
    if not isinstance(result, dict) or not {"status", "exit_code", "cause"} <= set(result):
        return None, [f"result.json lacks status/exit_code/cause: {result!r}"]
    problems = []
    if result["exit_code"] != returncode:
        problems.append(f"result.json exit_code {result['exit_code']} != exit {returncode}")
    cause = result["cause"]
    if not isinstance(cause, dict) or not isinstance(cause.get("reason"), str):
        problems.append(f"result.json cause without a reason: {cause!r}")
    status = result["status"]
    return (status if isinstance(status, str) else None), problems


def check_events(events: list[dict[str, Any]], state: Path) -> list[str]:
    """The run's own steps are all there, once, in order, and the last agrees with result."""
    steps = [e.get("reason") for e in events if e["event"] == "run"]
    problems = []
    if not steps or steps[0] != "starting":
        problems.append(f"events.jsonl does not begin with 'run starting': {steps[:3]}")
    if steps.count("ending") != 1:
        problems.append(f"'run ending' appears {steps.count('ending')} times")
    if not steps or steps[-1] != "finished":
        problems.append(f"events.jsonl does not end with 'run finished': {steps[-3:]}")
        return problems
    finished = next(e for e in reversed(events) if e.get("reason") == "finished")
    try:
        result = json.loads((state / "result.json").read_text())
    except (OSError, ValueError):
        return problems
    for key in ("status", "exit_code"):
        if finished.get(key) != result.get(key):
            problems.append(
                f"'run finished' {key} {finished.get(key)!r} != result {result.get(key)!r}"
            )
    return problems


def write_units(directory: Path, files: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, sections in files.items():
        lines = []
        for section, keys in sections.items():
            lines.append(f"[{section}]")
            lines += [f"{key} = {_toml(value)}" for key, value in keys.items()]
        (directory / name).write_text("\n".join(lines) + "\n")


def _toml(value: Any) -> str:
    """A TOML literal for str/int/float/list (JSON strings are valid TOML basic strings)."""
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(value)


def start_env() -> dict[str, str]:
    """The test's environment without Slurm, GPUs or another run's identity; the test
    session mark stays, so the suite's leak guard recognises the run's processes, and so
    does a choice of cgroup layer (``DDSUP_CGROUP``)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("SLURM_")
        and (not k.startswith("DDSUP_") or k in ("DDSUP_TEST_SESSION", "DDSUP_CGROUP"))
    }
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env
