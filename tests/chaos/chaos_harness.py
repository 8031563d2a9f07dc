"""Run one chaos schedule against a real ``ddsup start`` and judge what it left behind.

The harness launches ``ddsup start`` on the schedule's unit files, tails ``events.jsonl``
(a bounded poll: a file has no change event) to recognise the phases of the run, sends
each injection the moment its phase is reached, and then checks the promises of SPEC §3
and §4: the exit status of the cause table, a well-formed ``result.json`` and
``events.jsonl``, no process carrying the run's ``DDSUP_INVOCATION_ID`` alive 10 s after
``ddsup start`` ended (SIGKILL of ``ddsup start`` included), and no run past its bound.

It only ever signals processes that carry the run's invocation id (or ``ddsup start``
itself), and whatever happens it SIGKILLs everything of the run before returning.
"""

from __future__ import annotations

import contextlib
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

ORPHAN_GRACE = 10.0  # SPEC §4: nothing of the run alive this long after ddsup start ended
STOP_BOUND = 6.0  # seconds from the cause of the end to the exit of ddsup start
REENTRY_BOUND = 4.0  # seconds from a second stop signal to the exit (SIGKILL everything)
POLL = 0.01  # seconds between looks at events.jsonl and /proc
STATUS_OF_CODE = {70: "unit_failed", 75: "readiness_timeout"}


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


def kill_run(invocation_id: str) -> None:
    """SIGKILL every process of the run (the harness's own cleanup, after the checks)."""
    deadline = time.monotonic() + 5.0
    while (found := run_processes(invocation_id)) and time.monotonic() < deadline:
        for pid in found:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)


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

    run: int = 0
    orphans: int = 0
    wrong_exit: int = 0
    hangs: int = 0
    bad: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (
            f"chaos: schedules run {self.run}, orphans found {self.orphans}, "
            f"wrong exit codes {self.wrong_exit}, hangs {self.hangs}"
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
    seconds: float = 0.0
    stop_seconds: float | None = None  # from the cause of the end to the exit
    reentry_seconds: float | None = None  # from the second stop signal to the exit

    @property
    def slow_stop(self) -> bool:
        """The stop took longer than its bound: a hang, though not past the hard bound."""
        slow = self.stop_seconds is not None and self.stop_seconds > STOP_BOUND
        return slow or (self.reentry_seconds is not None and self.reentry_seconds > REENTRY_BOUND)

    @property
    def wrong_exit(self) -> bool:
        allowed = {self.schedule.expected_exit, *self.schedule.also_ok}
        return not self.hang and self.returncode not in allowed

    def report(self, state: Path) -> str:
        lines = [self.schedule.describe(), f"ddsup start: exit {self.returncode}"]
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
    """One schedule: write units, start, inject, wait, check, clean up."""

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
        self.tail = EventTail(self.state / "events.jsonl")
        self.view = RunView()
        self.outcome = Outcome(schedule)
        self.invocation_id: str | None = None
        self.started_at = 0.0
        self.fired_at: dict[str, float] = {}
        self._agents_seen = False
        self.start_pid = 0
        self.exited_wall = 0.0

    def run(self) -> Outcome:
        write_units(self.units, self.schedule.unit_files())
        self.started_at = time.monotonic()
        with self.output.open("wb") as output:
            process = subprocess.Popen(
                self._argv(),
                env=start_env(),
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=output,
            )
        try:
            self._drive(process)
            ended_at = time.monotonic()
            self._await_no_orphans(ended_at)
        finally:
            if process.poll() is None:
                process.kill()
            process.wait()
            if self.invocation_id is not None:
                kill_run(self.invocation_id)
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
    def _drive(self, process: subprocess.Popen[bytes]) -> None:
        pending = list(self.schedule.injections)
        deadline = self.started_at + self.schedule.bound
        while process.poll() is None:
            if time.monotonic() > deadline:
                self.outcome.hang = True
                process.kill()
                break
            self._look()
            pending = [i for i in pending if not self._try_fire(i, process)]
            time.sleep(POLL)
        self.exited_wall = time.time()
        self.outcome.returncode = process.wait()
        self.outcome.missed += [i.describe() for i in pending if i.role != "storm"]

    def _look(self) -> None:
        if self.invocation_id is None:
            self.invocation_id = read_invocation_id(self.state)
        self.tail.poll()
        self.view.update(self.tail.events)

    def _try_fire(self, injection: Injection, process: subprocess.Popen[bytes]) -> bool:
        """Fire ``injection`` if its phase is reached and its target exists; True when done
        with it (fired, or a noise injection whose target is gone for good)."""
        if self.invocation_id is None or not self._reached(injection):
            return False
        if (
            injection.role == "primary"
            and self.before_fire
            and not self.before_fire(self, injection)
        ):
            return False
        pid = self._resolve(injection.target, process)
        if pid is None:
            if injection.role == "noise" and (self._phase() or Phase.PREFLIGHT) >= Phase.RUNNING:
                self.outcome.missed.append(injection.describe() + " (no such process)")
                return True
            return False
        try:
            if pid == process.pid:
                process.send_signal(injection.signum)  # never once it has been reaped
            else:
                os.kill(pid, injection.signum)
        except ProcessLookupError:
            return False
        key = "reentry" if injection.role == "storm" else injection.role
        if injection.role == "storm" and key in self.fired_at:
            return False  # a storm goes on until ddsup start exits
        self.fired_at[key] = self.fired_at.get(key, time.time())
        elapsed = time.monotonic() - self.started_at
        self.outcome.fired.append(f"{injection.describe()} (pid {pid}, t+{elapsed:.2f}s)")
        return injection.role != "storm"

    def _resolve(self, target: str, process: subprocess.Popen[bytes]) -> int | None:
        assert self.invocation_id is not None
        if target == "start":
            return process.pid
        if target.startswith("agent:"):
            nodes = agent_pids(self.invocation_id, process.pid)
            return nodes.get(target.split(":", 1)[1])
        instance = "worker" if target == "worker" else target.split(":", 1)[1]
        pid = self.view.pid.get(instance)
        if pid is None or self.view.state.get(instance) not in ("starting", "ready"):
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
    def _await_no_orphans(self, ended_at: float) -> None:
        if self.invocation_id is None:
            self._look()
        if self.invocation_id is None:
            self.outcome.problems.append("run.json never named an invocation id")
            return
        left = run_processes(self.invocation_id)
        while left and time.monotonic() < ended_at + ORPHAN_GRACE:
            time.sleep(0.05)  # no event exists for "a process that is not ours died"
            left = run_processes(self.invocation_id)
        self.outcome.orphans = left

    def _check_artefacts(self) -> None:
        self.tail.finish()
        self.outcome.problems += self.tail.problems
        sched = self.schedule
        if self.outcome.hang:
            return
        if sched.expected_status is None:
            return  # ddsup start was SIGKILLed: no result.json is promised
        self.outcome.problems += check_result(self.state, self.outcome.returncode)
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


def check_result(state: Path, returncode: int | None) -> list[str]:
    """``result.json``: status, exit_code and cause, agreeing with the exit status."""
    try:
        result = json.loads((state / "result.json").read_text())
    except FileNotFoundError:
        return ["no result.json"]
    except ValueError as err:
        return [f"result.json is not JSON: {err}"]
    if not isinstance(result, dict) or not {"status", "exit_code", "cause"} <= set(result):
        return [f"result.json lacks status/exit_code/cause: {result!r}"]
    problems = []
    if result["exit_code"] != returncode:
        problems.append(f"result.json exit_code {result['exit_code']} != exit {returncode}")
    wanted = expected_status(returncode)
    if wanted is not None and result["status"] not in wanted:
        problems.append(f"result.json status {result['status']!r} for exit {returncode}")
    cause = result["cause"]
    if not isinstance(cause, dict) or not isinstance(cause.get("reason"), str):
        problems.append(f"result.json cause without a reason: {cause!r}")
    return problems


def expected_status(code: int | None) -> set[str] | None:
    if code is None:
        return None
    if code == 0:
        return {"ok"}
    if code in STATUS_OF_CODE:
        return {STATUS_OF_CODE[code]}
    if code > 128:
        return {"stopped", "worker_failed"}
    return {"worker_failed"}


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
    session mark stays, so the suite's leak guard recognises the run's processes."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("SLURM_") and (not k.startswith("DDSUP_") or k == "DDSUP_TEST_SESSION")
    }
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env
