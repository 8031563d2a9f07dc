"""What the run's state hears (inputs) and what it decides (decisions): plain values.

:class:`~ddsup.decide._run_state.RunState` takes one input at a time and returns the
decisions it leads to; the controller feeds inputs in from its tasks (the node agents'
connections, the services of its own node, signals, operators) and carries decisions
out. Neither kind holds a task, a channel or a process, so every rule can be tested by
feeding inputs and reading decisions.
"""

from __future__ import annotations

from dataclasses import dataclass

from ddsup._errors import DdsupError
from ddsup._exit import ExitStatus
from ddsup.channel import LanesChanged, PreflightReport
from ddsup.plan import Plan
from ddsup.record import Outcome, RecordedEvent


@dataclass(frozen=True)
class Host:
    """Where instances run: a node's agent, or the controller itself (the client node)."""

    node: str
    agent: bool


# --- inputs -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Observed:
    """An event of the run: an instance's transition or process, wherever it runs."""

    event: RecordedEvent


@dataclass(frozen=True)
class PreflightReported:
    """An agent's preflight report arrived (its ports, GPUs and problems)."""

    report: PreflightReport


@dataclass(frozen=True)
class PreflightOver:
    """Every agent reported, or the wait for them ran out after ``waited`` seconds."""

    waited: float


@dataclass(frozen=True)
class AgentGone:
    """An agent's connection ended; ``reason`` says how (lost, or went away)."""

    node: str
    reason: str


@dataclass(frozen=True)
class AgentSignalled:
    """An agent received a stop signal (``scancel``) and is stopping its node."""

    node: str
    signum: int


@dataclass(frozen=True)
class AgentProcessExited:
    """A process hosting agents (one agent, or the ``srun`` step of all) ended.

    ``nodes``: the nodes whose agents it hosted (lost with it, unless the run is stopping).
    """

    label: str
    exit: ExitStatus
    nodes: tuple[str, ...] = ()


@dataclass(frozen=True)
class StopSignalled:
    """SIGTERM, SIGINT or SIGHUP to ``ddsup start``."""

    signum: int


@dataclass(frozen=True)
class StopRequested:
    """``ddsup stop``: as SIGTERM to ``ddsup start``."""


@dataclass(frozen=True)
class SignalToForward:
    """A signal some unit's ``forward_signals`` names reached ``ddsup start``."""

    signum: int


@dataclass(frozen=True)
class EndNear:
    """The job's end is ``stop_before_end`` of ``unit`` away: stop it (``reason`` says so)."""

    unit: str
    reason: str


@dataclass(frozen=True)
class StartupFailed:
    """Launching the agents (or reaching them) failed before anything started."""

    error: DdsupError


@dataclass(frozen=True)
class StopBegins:
    """The run has ended; the stop sequence begins."""


@dataclass(frozen=True)
class RestartRequested:
    """``ddsup restart``: these instances (checked by :meth:`RunState.restart_targets`),
    one at a time when ``rolling``; ``ticket`` names the request for its progress."""

    ticket: int
    instances: tuple[str, ...]
    rolling: bool = False


@dataclass(frozen=True)
class Drained:
    """A lane out of the rotation has nothing in flight at the endpoint (every endpoint
    process said so), or the wait for that ran out (``timed_out``)."""

    instance: str
    timed_out: bool = False


Input = (
    Observed
    | PreflightReported
    | PreflightOver
    | AgentGone
    | AgentSignalled
    | AgentProcessExited
    | StopSignalled
    | StopRequested
    | SignalToForward
    | EndNear
    | StartupFailed
    | StopBegins
    | RestartRequested
    | Drained
)


# --- decisions ----------------------------------------------------------------------------
@dataclass(frozen=True)
class StartOn:
    """Start these instances where ``host`` runs them."""

    host: Host
    instances: tuple[str, ...]


@dataclass(frozen=True)
class StopOn:
    """Stop these instances where ``host`` runs them, saying ``reason``."""

    host: Host
    instances: tuple[str, ...]
    reason: str = "stop requested"


@dataclass(frozen=True)
class RestartOn:
    """Stop these instances and start them again at once (or start them again, if over)."""

    host: Host
    instances: tuple[str, ...]
    reason: str = "restart requested"


@dataclass(frozen=True)
class AwaitDrain:
    """Tell the run when the endpoint has nothing in flight to ``instance`` (it just left
    the rotation), or after ``limit`` seconds: :class:`Drained` either way."""

    instance: str
    limit: float


@dataclass(frozen=True)
class SignalOn:
    """Send ``signum`` to these instances where ``host`` runs them."""

    host: Host
    instances: tuple[str, ...]
    signum: int


@dataclass(frozen=True)
class TakeDownOn:
    """End these replica ranks' processes and hold them (a peer's ended)."""

    host: Host
    instances: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class ResumeOn:
    """Start these held replica ranks again (``master_port`` None: rank 0 picks it)."""

    host: Host
    instances: tuple[str, ...]
    delay: float
    attempt: int
    master_port: int | None = None


@dataclass(frozen=True)
class FailOn:
    """These held replica ranks have failed for good with their replica."""

    host: Host
    instances: tuple[str, ...]
    reason: str
    readiness_timeout: bool = False


NodeDecision = StartOn | StopOn | RestartOn | SignalOn | TakeDownOn | ResumeOn | FailOn
"""A decision for the instances of one host; ``_nodes.deliver`` carries it out there."""


@dataclass(frozen=True)
class KillEverything:
    """SIGKILL every instance everywhere, and the agents nobody can ask."""


@dataclass(frozen=True)
class EndRun:
    """The run ends with ``outcome`` (the first cause); the stop sequence follows."""

    outcome: Outcome


@dataclass(frozen=True)
class PublishLanes:
    """Serving lanes joined or left the ready set: tell the endpoint's feed."""

    changed: LanesChanged


@dataclass(frozen=True)
class Record:
    """Write this event to ``events.jsonl`` (and the console): a run event, or a
    transition the run's state records itself (the instances of a lost node)."""

    event: RecordedEvent


@dataclass(frozen=True)
class PlanPorted:
    """Preflight picked ports for ``port = "auto"`` lanes: this plan is the run's now."""

    plan: Plan


Decision = NodeDecision | AwaitDrain | KillEverything | EndRun | PublishLanes | Record | PlanPorted
