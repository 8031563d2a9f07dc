"""Chaos schedules: a unit set, signals to inject at event-defined phases, and the exit
status that docs/cli.md's exit statuses demand, all derived from ``(seed, index)`` alone.

A schedule has exactly one *primary* cause, the thing that must end the run (a stop
signal to ``ddsup start``, the worker's end, a unit failing for good, a readiness
timeout, a lost node agent, or SIGKILL of ``ddsup start`` itself). The unit set is built
so that nothing else can end the run first: *noise* injections only hit targets that
survive them (a lane that restarts, a lane that ignores SIGTERM, an unforwarded SIGUSR1),
so the expected exit status is known before the run starts. An optional *re-entry*
injection sends a second stop signal once ``run stopping`` appears: it must turn the
stop into SIGKILL-everything without changing the exit status.

Nothing here touches a process; :mod:`chaos_harness` runs what this module describes.
"""

from __future__ import annotations

import dataclasses
import enum
import random
import signal
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
ALL_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGKILL, signal.SIGUSR1, signal.SIGHUP)
EXIT_UNIT_FAILED = 70
EXIT_READINESS_TIMEOUT = 75
ALSO_OK_STATUS = {EXIT_UNIT_FAILED: "unit_failed"}  # result.json status of an also_ok exit
VLLM_LIKE = str(Path(__file__).parent / "vllm_like.py")
SCHEDULE_BOUND = 45.0  # seconds from launch to exit; past it the schedule is a hang


class Phase(enum.IntEnum):
    """Points of a run, in the order a run passes them; each is recognised from events
    (and, for PREFLIGHT, from the node agents appearing in /proc)."""

    PREFLIGHT = 0  # every node agent is up (running preflight), no unit has started
    FIRST_STARTING = 1  # the first lane reported ``starting``
    MID_STAGGER = 2  # a lane is ``waiting`` for its stagger slot
    READINESS_WAIT = 3  # a slow lane has a process but is not ready yet
    RUNNING = 4  # every healthy lane has been ready, and the worker (if any) runs
    STOPPING = 5  # ``run stopping`` appeared: the stop sequence is under way


class LaneKind(str, enum.Enum):
    PLAIN = "plain"  # sleep; ready once started
    SLOW = "slow"  # ready when a 0.6 s exec probe passes
    STUBBORN = "stubborn"  # ignores SIGTERM and SIGINT: only SIGKILL after timeout_stop ends it
    SETSID = "setsid"  # leaves a setsid grandchild that sleeps forever
    FAKE_VLLM = "fakevllm"  # ddsup fake-vllm --spawn-engine (a setsid EngineCore), http probe
    CRASH = "crash"  # exits 3 shortly after every start: a crash loop
    NEVER_READY = "never"  # its probe never passes
    # vLLM's process model (vllm_like.py): an API server whose engine calls setsid and
    # setproctitle, which wipes the run's tag from its environment
    RETITLE = "retitle"  # the engine's environment is clobbered by setproctitle
    ENV_CLEARED = "envclear"  # … and it re-executes itself with a cleared environment
    DAEMON = "daemon"  # … and it double-forks: an orphan from its first instant
    ORPHANER = "orphaner"  # … and the first start's API server exits 1, engine left
    ORPHANER_RETITLED = "orphaner-retitled"  # the same, the engine keeps its environment


HEALTHY = frozenset(
    {
        LaneKind.PLAIN,
        LaneKind.SLOW,
        LaneKind.STUBBORN,
        LaneKind.SETSID,
        LaneKind.FAKE_VLLM,
        LaneKind.RETITLE,
        LaneKind.ENV_CLEARED,
        LaneKind.DAEMON,
        LaneKind.ORPHANER,
        LaneKind.ORPHANER_RETITLED,
    }
)
VLLM_LIKE_FLAGS = {
    LaneKind.RETITLE: ("--clobber",),
    LaneKind.ENV_CLEARED: ("--clobber", "--env-clear"),
    LaneKind.DAEMON: ("--clobber", "--env-clear", "--double-fork"),
    LaneKind.ORPHANER: (
        *("--clobber", "--env-clear", "--exit-after", "0.3", "--exit-code", "1"),
        *("--once", "{state_dir}/orphaned-{instance}"),
    ),
    LaneKind.ORPHANER_RETITLED: (
        *("--clobber", "--exit-after", "0.3", "--exit-code", "1"),
        *("--once", "{state_dir}/orphaned-{instance}"),
    ),
}


class Cause(str, enum.Enum):
    STOP_SIGNAL = "stop-signal"  # SIGTERM/SIGINT/SIGHUP to ddsup start → 128+N
    KILL_START = "kill-start"  # SIGKILL to ddsup start → -9, the sentinel cleans up
    WORKER_EXIT = "worker-exit"  # the worker exits K by itself → K
    WORKER_SIGNAL = "worker-signal"  # a signal kills the worker → 128+N
    FORWARDED = "forwarded"  # SIGUSR1 to ddsup start, forwarded to the worker → 138
    LANE_KILLED = "lane-killed"  # a signal kills a restart=no, stop-all lane → 70
    CRASH_LOOP = "crash-loop"  # a stop-all lane hits its start limit → 70
    READINESS = "readiness"  # a stop-all lane is never ready → 75
    AGENT_LOST = "agent-lost"  # SIGKILL to a node agent → 70; TERM/HUP once it runs → 128+N


# How often each cause is drawn: signals to ddsup start and its agents at every phase
# are the heart of the suite; the causes that need no injection are rarer.
CAUSE_WEIGHTS = {
    Cause.STOP_SIGNAL: 5,
    Cause.KILL_START: 2,
    Cause.AGENT_LOST: 2,
    Cause.LANE_KILLED: 2,
    Cause.WORKER_SIGNAL: 1,
    Cause.WORKER_EXIT: 1,
    Cause.FORWARDED: 1,
    Cause.CRASH_LOOP: 1,
    Cause.READINESS: 1,
}
PHASE_WEIGHTS = {
    Phase.PREFLIGHT: 1,
    Phase.FIRST_STARTING: 1,
    Phase.MID_STAGGER: 2,
    Phase.READINESS_WAIT: 2,
    Phase.RUNNING: 2,
}


@dataclass(frozen=True)
class LaneUnit:
    """One lane unit (a template): ``replicas`` instances of one behaviour."""

    name: str
    kind: LaneKind
    replicas: int
    fragile: bool  # restart = "no", on_failure = "stop-all" (a primary's target)
    stagger: float

    def instances(self) -> list[str]:
        return [f"{self.name}@{i}" for i in range(self.replicas)]

    def sections(self) -> dict[str, dict[str, Any]]:
        service, ready = _lane_behaviour(self.kind)
        if self.fragile:
            service.update(restart="no", on_failure="stop-all")
        elif self.kind is LaneKind.CRASH:
            service.update(restart="on-failure", start_limit_burst=3, on_failure="continue")
        else:
            service.update(restart="on-failure", start_limit_burst=8)
        lane = {
            "model": self.name,
            "gpus": 1,
            "replicas": self.replicas,
            "port": "auto",
            "stagger": f"{int(self.stagger * 1000)}ms",
        }
        sections: dict[str, dict[str, Any]] = {"unit": {"type": "lane"}, "service": service}
        if ready:
            sections["ready"] = ready
        sections["lane"] = lane
        return sections


def _lane_behaviour(kind: LaneKind) -> tuple[dict[str, Any], dict[str, Any]]:
    """``[service]`` and ``[ready]`` of a lane kind (cheap processes: sh and sleep)."""
    service: dict[str, Any] = {"timeout_stop": "1s", "restart_sec": "100ms"}
    ready: dict[str, Any] = {}
    if kind is LaneKind.PLAIN:
        service["exec"] = ["sleep", "600"]
    elif kind is LaneKind.SLOW:
        service["exec"] = ["sleep", "600"]
        ready = {"exec": ["sleep", "0.6"], "interval": "50ms"}
    elif kind is LaneKind.STUBBORN:
        service["exec"] = ["sh", "-c", "trap '' TERM INT; exec sleep 600"]
        service["timeout_stop"] = "800ms"
    elif kind is LaneKind.SETSID:
        service["exec"] = ["sh", "-c", "setsid sleep 600 & exec sleep 600"]
    elif kind is LaneKind.FAKE_VLLM:
        service["exec"] = [
            *("ddsup", "fake-vllm", "--port", "{port}", "--model", "{model}"),
            *("--spawn-engine", "--startup-delay", "0.2", "--shutdown-timeout", "0.2"),
        ]
        ready = {"http": "http://{host}:{port}/health", "interval": "100ms"}
    elif kind in VLLM_LIKE_FLAGS:
        service["exec"] = [sys.executable, VLLM_LIKE, *VLLM_LIKE_FLAGS[kind]]
    elif kind is LaneKind.CRASH:
        service["exec"] = ["sh", "-c", "sleep 0.2; exit 3"]
        service["restart_sec"] = "50ms"
    else:
        service["exec"] = ["sleep", "600"]
        service["timeout_start"] = "700ms"
        ready = {"exec": ["false"], "interval": "50ms"}
    return service, ready


class WorkerKind(str, enum.Enum):
    NONE = "none"  # no worker: the run lasts until something stops it
    FOREVER = "forever"  # sleeps until stopped
    SETSID = "setsid"  # sleeps until stopped, with a setsid grandchild
    EXITS = "exits"  # exits with a chosen status shortly after it starts


@dataclass(frozen=True)
class Worker:
    kind: WorkerKind
    after: tuple[str, ...]  # the healthy lane units: it starts once they are all ready
    exit_code: int = 0
    forward_usr1: bool = False
    exit_after: float = 0.3  # EXITS: seconds after its start

    def sections(self) -> dict[str, dict[str, Any]]:
        if self.kind is WorkerKind.EXITS:
            argv = ["sh", "-c", f"sleep {self.exit_after:g}; exit {self.exit_code}"]
        elif self.kind is WorkerKind.SETSID:
            argv = ["sh", "-c", "setsid sleep 600 & exec sleep 600"]
        else:
            argv = ["sleep", "600"]
        service: dict[str, Any] = {"exec": argv, "timeout_stop": "1s"}
        if self.forward_usr1:
            service["forward_signals"] = ["SIGUSR1"]
        return {"unit": {"type": "worker", "after": list(self.after)}, "service": service}


@dataclass(frozen=True)
class Injection:
    """Send ``signum`` to ``target`` once the run reaches ``phase``.

    Targets: ``start`` (ddsup start), ``agent:NODE``, ``lane:INSTANCE``, ``worker``.
    """

    phase: Phase
    target: str
    signum: signal.Signals
    role: str  # primary | prelude (before the primary) | noise | reentry | storm

    # A storm is a reentry repeated every few milliseconds until ddsup start exits (a
    # user hammering Ctrl-C, or scancel and a job script's trap both signalling).

    def describe(self) -> str:
        return f"{self.role}: {self.signum.name} → {self.target} at {self.phase.name}"


@dataclass(frozen=True)
class Schedule:
    seed: int
    index: int
    nodes: int
    gpus_per_node: int
    lanes: tuple[LaneUnit, ...]
    worker: Worker
    client_setsid_service: bool
    cause: Cause
    injections: tuple[Injection, ...]
    expected_exit: int  # -9 when ddsup start itself is SIGKILLed
    expected_status: str | None  # result.json status; None: no result.json (SIGKILL)
    bound: float = SCHEDULE_BOUND
    notes: tuple[str, ...] = field(default=())
    also_ok: tuple[int, ...] = ()  # other exit statuses a race may legitimately give

    @property
    def test_id(self) -> str:
        return f"schedule-{self.seed}-{self.index}"

    def allowed(self) -> dict[int, str | None]:
        """Exit status → the result.json status the schedule demands with it."""
        allowed: dict[int, str | None] = {self.expected_exit: self.expected_status}
        for code in self.also_ok:
            allowed[code] = ALSO_OK_STATUS[code]
        return allowed

    def unit_files(self) -> dict[str, Mapping[str, Mapping[str, Any]]]:
        """File name → TOML sections."""
        files: dict[str, Mapping[str, Mapping[str, Any]]] = {
            f"{lane.name}@.toml": lane.sections() for lane in self.lanes
        }
        if self.worker.kind is not WorkerKind.NONE:
            files["worker.toml"] = self.worker.sections()
        if self.client_setsid_service:
            files["helper.toml"] = {
                "unit": {"type": "service"},
                "service": {
                    "exec": ["sh", "-c", "setsid sleep 600 & exec sleep 600"],
                    "timeout_stop": "1s",
                },
            }
        return files

    def lane_instances(self, *, healthy_only: bool = False) -> list[str]:
        return [
            i
            for lane in self.lanes
            if not healthy_only or lane.kind in HEALTHY
            for i in lane.instances()
        ]

    def describe(self) -> str:
        lanes = ", ".join(
            f"{u.name}×{u.replicas}{' fragile' if u.fragile else ''}" for u in self.lanes
        )
        worker = self.worker.kind.value
        if self.worker.kind is WorkerKind.EXITS:
            worker += f"({self.worker.exit_code})"
        if self.worker.forward_usr1:
            worker += "+forward USR1"
        lines = [
            f"{self.test_id}: cause {self.cause.value}, expect exit {self.expected_exit}"
            f" ({self.expected_status}); nodes {self.nodes}×{self.gpus_per_node} GPUs;"
            f" lanes [{lanes}]; worker {worker}"
            + ("; client setsid service" if self.client_setsid_service else ""),
            *(f"  {i.describe()}" for i in self.injections),
            *(f"  note: {n}" for n in self.notes),
        ]
        return "\n".join(lines)


# --- generation -----------------------------------------------------------------------


# (seed, index) of schedules that run whatever the seed: a rotated seed finds new bugs,
# these show that the suite still works on schedules known to pass.
SMOKE = tuple((1, index) for index in range(8))


def make_schedule(seed: int, index: int) -> Schedule:
    """The schedule ``index`` of ``seed``: the same pair always gives the same schedule."""
    rng = random.Random(f"ddsup-chaos:{seed}:{index}")
    cause = rng.choices(list(CAUSE_WEIGHTS), weights=list(CAUSE_WEIGHTS.values()))[0]
    nodes = rng.choice((1, 2, 2, 3)) if cause is not Cause.AGENT_LOST else rng.choice((2, 3))
    gpus = rng.choice((2, 3))
    lanes = _lanes(rng, cause, nodes * gpus)
    worker = _worker(rng, cause, lanes)
    sched = Schedule(  # the unit set; injections and expectations follow from it
        seed=seed,
        index=index,
        nodes=nodes,
        gpus_per_node=gpus,
        lanes=lanes,
        worker=worker,
        client_setsid_service=rng.random() < 0.3,
        cause=cause,
        injections=(),
        expected_exit=0,
        expected_status=None,
    )
    primary, code, status = _primary(rng, sched)
    also_ok: tuple[int, ...] = ()
    if cause is Cause.AGENT_LOST and primary[0].phase is Phase.PREFLIGHT and code != 70:
        also_ok = (EXIT_UNIT_FAILED,)  # killed before its signal handler is up: a lost agent
    injections = _noise(rng, sched, primary) + primary
    if cause is not Cause.KILL_START and rng.random() < 0.4:
        second = rng.choice((signal.SIGTERM, signal.SIGINT))
        role = "storm" if rng.random() < 0.2 else "reentry"
        injections.append(Injection(Phase.STOPPING, "start", second, role))
    if cause is not Cause.KILL_START and rng.random() < 0.25:  # an agent dies while stopping
        node = f"node{rng.randrange(lane_nodes(sched))}"
        # it must still be there: a stubborn lane that runs keeps its agent stopping for
        # 0.8 s (one still waiting for its stagger slot stops at once: only if every lane
        # started before the end)
        killed = {i.target for i in injections if i.signum is signal.SIGKILL}
        started = cause is Cause.WORKER_EXIT or any(i.phase >= Phase.RUNNING for i in primary)
        if started and node in stubborn_nodes(sched) and f"agent:{node}" not in killed:
            injections.append(Injection(Phase.STOPPING, f"agent:{node}", signal.SIGKILL, "noise"))
    return dataclasses.replace(
        sched,
        injections=tuple(injections),
        expected_exit=code,
        expected_status=status,
        also_ok=also_ok,
    )


def _lanes(rng: random.Random, cause: Cause, capacity: int) -> tuple[LaneUnit, ...]:
    """1–3 lane units that fit ``capacity`` GPUs; always one healthy unit, and the unit a
    built-in cause needs (a fragile target, a stop-all crash loop, a never-ready lane)."""
    kinds = [LaneKind.PLAIN, LaneKind.SLOW, LaneKind.STUBBORN, LaneKind.SETSID]
    kinds += [LaneKind.RETITLE, LaneKind.ENV_CLEARED, LaneKind.DAEMON, LaneKind.ORPHANER]
    kinds += [LaneKind.ORPHANER_RETITLED]
    if rng.random() < 0.15:
        kinds.append(LaneKind.FAKE_VLLM)
    if cause not in (Cause.CRASH_LOOP, Cause.READINESS) and rng.random() < 0.3:
        kinds.append(LaneKind.CRASH)  # on_failure = continue: a crash loop that ends nothing
    chosen: list[LaneKind] = [rng.choice([k for k in kinds if k is not LaneKind.CRASH])]
    extra = rng.randint(0, 2)
    chosen += rng.sample([k for k in kinds if k not in chosen], min(extra, len(kinds) - 1))
    fragile = None
    if cause is Cause.LANE_KILLED:
        fragile = rng.choice((LaneKind.PLAIN, LaneKind.SLOW, LaneKind.SETSID))
        chosen = [k for k in chosen if k is not fragile]
    elif cause is Cause.CRASH_LOOP:
        fragile = LaneKind.CRASH
    elif cause is Cause.READINESS:
        fragile = LaneKind.NEVER_READY
    if not any(k in HEALTHY for k in chosen):
        chosen.append(LaneKind.PLAIN)
    chosen = chosen[: max(1, capacity - (fragile is not None))]
    specs: list[tuple[LaneKind, bool]] = [(k, False) for k in chosen]
    if fragile is not None:
        specs.append((fragile, True))
    replicas = _split(rng, capacity, len(specs))
    units = []
    for n, ((kind, is_fragile), count) in enumerate(zip(specs, replicas, strict=True)):
        name = f"{chr(ord('a') + n)}-{kind.value}"
        if is_fragile:
            name = f"{chr(ord('a') + n)}-fragile-{kind.value}"
            count = 1
        stagger = rng.choice((0.1, 0.3, 0.5))
        units.append(LaneUnit(name, kind, count, is_fragile, stagger))
    return tuple(units)


def _split(rng: random.Random, capacity: int, parts: int) -> list[int]:
    """Replica counts ≥ 1 per part, summing to at most ``capacity``."""
    counts = [1] * parts
    for _ in range(rng.randint(0, capacity - parts)):
        counts[rng.randrange(parts)] += 1
    return counts


def _worker(rng: random.Random, cause: Cause, lanes: tuple[LaneUnit, ...]) -> Worker:
    after = tuple(f"{u.name}@" for u in lanes if u.kind in HEALTHY and not u.fragile)
    if cause is Cause.WORKER_EXIT:
        return Worker(WorkerKind.EXITS, after, exit_code=rng.choice((0, 0, 3, 42)))
    if cause in (Cause.WORKER_SIGNAL, Cause.FORWARDED):
        kind = rng.choice((WorkerKind.FOREVER, WorkerKind.SETSID))
        return Worker(kind, after, forward_usr1=cause is Cause.FORWARDED)
    kind = rng.choice((WorkerKind.NONE, WorkerKind.FOREVER, WorkerKind.SETSID))
    return Worker(kind, after)


def _primary(rng: random.Random, sched: Schedule) -> tuple[list[Injection], int, str | None]:
    """The primary injection(s) and the exit status and result status they demand."""
    cause = sched.cause
    phases = _reachable_phases(sched)
    if cause is Cause.STOP_SIGNAL:
        signum = rng.choice(STOP_SIGNALS)
        phase = _pick_phase(rng, phases)
        return [Injection(phase, "start", signum, "primary")], 128 + signum, "stopped"
    if cause is Cause.KILL_START:
        kill = Injection(_pick_phase(rng, phases), "start", signal.SIGKILL, "primary")
        if rng.random() < 0.3:  # SIGKILL in the middle of the stop sequence
            first = Injection(_pick_phase(rng, phases), "start", signal.SIGTERM, "prelude")
            return [first, Injection(Phase.STOPPING, "start", signal.SIGKILL, "primary")], -9, None
        return [kill], -9, None
    if cause is Cause.WORKER_EXIT:
        code = sched.worker.exit_code
        return [], code, "ok" if code == 0 else "worker_failed"
    if cause is Cause.WORKER_SIGNAL:
        signum = rng.choice(ALL_SIGNALS)
        return (
            [Injection(Phase.RUNNING, "worker", signum, "primary")],
            128 + signum,
            "worker_failed",
        )
    if cause is Cause.FORWARDED:
        inj = Injection(Phase.RUNNING, "start", signal.SIGUSR1, "primary")
        return [inj], 128 + signal.SIGUSR1, "worker_failed"
    if cause is Cause.LANE_KILLED:
        [fragile] = [u for u in sched.lanes if u.fragile]
        signum = rng.choice(ALL_SIGNALS)
        phase = Phase.READINESS_WAIT if fragile.kind is LaneKind.SLOW else Phase.RUNNING
        target = f"lane:{fragile.instances()[0]}"
        return [Injection(phase, target, signum, "primary")], EXIT_UNIT_FAILED, "unit_failed"
    if cause is Cause.CRASH_LOOP:
        return [], EXIT_UNIT_FAILED, "unit_failed"
    if cause is Cause.READINESS:
        return [], EXIT_READINESS_TIMEOUT, "readiness_timeout"
    node = f"node{rng.choice(_fatal_nodes(sched))}"
    signum = rng.choice((signal.SIGKILL, signal.SIGKILL, signal.SIGTERM, signal.SIGHUP))
    phase = _pick_phase(rng, phases)
    agent = [Injection(phase, f"agent:{node}", signum, "primary")]
    if signum is signal.SIGKILL:
        return agent, EXIT_UNIT_FAILED, "unit_failed"  # gone without a word: a lost agent
    return agent, 128 + signum, "stopped"  # scancel: the agent tells the controller why


def _fatal_nodes(sched: Schedule) -> list[int]:
    """Nodes whose loss ends the run: some lane there says ``on_failure = "stop-all"``
    (a node of CRASH lanes only, which say ``continue``, is lost and the run goes on)."""
    lanes = [lane for lane in sched.lanes for _ in lane.instances()]  # placement order
    fatal = {
        index // sched.gpus_per_node
        for index, lane in enumerate(lanes)
        if lane.fragile or lane.kind is not LaneKind.CRASH
    }
    return sorted(fatal) or list(range(lane_nodes(sched)))


def stubborn_nodes(sched: Schedule) -> set[str]:
    """Nodes that get a stubborn lane (placement fills nodes in unit-name order)."""
    nodes = set()
    for n, instance in enumerate(sched.lane_instances()):
        unit = next(u for u in sched.lanes if instance in u.instances())
        if unit.kind is LaneKind.STUBBORN:
            nodes.add(f"node{n // sched.gpus_per_node}")
    return nodes


def lane_nodes(sched: Schedule) -> int:
    """How many nodes get lanes (and so an agent): lanes fill the nodes in order."""
    return min(sched.nodes, -(-len(sched.lane_instances()) // sched.gpus_per_node))


def _reachable_phases(sched: Schedule) -> list[Phase]:
    """Phases a run of this unit set passes (before anything ends it)."""
    phases = [Phase.PREFLIGHT, Phase.FIRST_STARTING, Phase.RUNNING]
    if _has_stagger_window(sched):
        phases.append(Phase.MID_STAGGER)
    if any(u.kind is LaneKind.SLOW for u in sched.lanes):
        phases.append(Phase.READINESS_WAIT)
    return sorted(phases)


def _pick_phase(rng: random.Random, phases: list[Phase]) -> Phase:
    return rng.choices(phases, weights=[PHASE_WEIGHTS[p] for p in phases])[0]


def _has_stagger_window(sched: Schedule) -> bool:
    """Some node gets two or more lanes (placement fills nodes in unit-name order)."""
    return sum(u.replicas for u in sched.lanes) >= 2 and sched.gpus_per_node >= 2


def _noise(rng: random.Random, sched: Schedule, primary: list[Injection]) -> list[Injection]:
    """Injections that must not change how the run ends, at phases before the primary's."""
    last = primary[0].phase if primary else Phase.FIRST_STARTING
    ends_by_itself = sched.cause in (Cause.CRASH_LOOP, Cause.READINESS, Cause.WORKER_EXIT)
    if ends_by_itself:
        # the run may end any moment after that (a worker starts once its lanes were ready
        # once, and exits 0.3 s later, while a lane the noise killed may still restart)
        last = Phase.FIRST_STARTING
    phases = [p for p in _reachable_phases(sched) if p <= last]
    out = []
    for _ in range(rng.randint(0, 3)):
        target, signum = _noise_target(rng, sched)
        if target is None:
            continue
        phase = rng.choice(phases)
        if target.startswith("lane:"):
            phase = max(phase, Phase.FIRST_STARTING)  # no lane runs before
            if phase > last or ends_by_itself:
                continue  # the run could end before the lane runs: it might never fire
        out.append(Injection(phase, target, signum, "noise"))
    out.sort(key=lambda i: i.phase)
    return out


def _noise_target(rng: random.Random, sched: Schedule) -> tuple[str | None, signal.Signals]:
    forwards = sched.worker.forward_usr1
    choice = rng.random()
    if choice < 0.25 and not forwards:
        return "start", signal.SIGUSR1  # not forwarded to anything: ignored
    resilient = [u for u in sched.lanes if not u.fragile and u.kind in HEALTHY]
    if not resilient:
        return None, signal.SIGUSR1
    unit = rng.choice(resilient)
    instance = rng.choice(unit.instances())
    if unit.kind is LaneKind.STUBBORN and choice < 0.6:
        return f"lane:{instance}", rng.choice((signal.SIGTERM, signal.SIGINT))
    if unit.kind is LaneKind.FAKE_VLLM:
        return f"lane:{instance}", signal.SIGKILL  # SIGTERM would be a clean exit 0
    return f"lane:{instance}", rng.choice(ALL_SIGNALS)
