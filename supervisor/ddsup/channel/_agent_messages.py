"""The messages of an agent's connection: what a node agent and the controller say.

Apart from the rest of ``_messages`` (the endpoint's lane feed, the operators') because a
node agent needs only these: every frozen dataclass costs its module's importer the
compiling of each generated method, and an agent's imports are on a run's path to its
first lane. ``_messages``
re-exports them; ``_agent_codec`` reads and writes them. Who sends what::

    agent → controller      Hello (the first line), Inventory (right after it), then
                            PreflightReport, EventReport, Signalled, AgentStopped
    controller → agent      Setup, Start, Stop, Restart, SignalInstances, Kill, Shutdown,
                            TakeDown, Resume, FailHeld (a multi-node replica's restart)
    controller ⇄ agent      Heartbeat (``_heartbeat``)
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ddsup.channel._hello import Hello, check_name
from ddsup.plan import Plan
from ddsup.record import NodeEvent


def _check_signal(signum: int) -> None:
    if signum not in _SIGNALS:
        raise ValueError(f"{signum} is not a signal number")


_SIGNALS = frozenset(int(s) for s in signal.valid_signals())


@dataclass(frozen=True)
class Inventory:
    """What an agent found on its node, sent right after its hello, before any plan.

    ``gpus`` are the entries the job was given there (``CUDA_VISIBLE_DEVICES`` entries),
    ``source`` where they were found; the plan is made from every node's inventory.
    """

    op: ClassVar[str] = "inventory"
    gpus: tuple[str, ...]
    source: str

    def __post_init__(self) -> None:
        for gpu in self.gpus:
            check_name("a GPU", gpu)


@dataclass(frozen=True)
class Setup:
    """The plan and the run's facts, to an agent that said hello (never a secret)."""

    op: ClassVar[str] = "setup"
    plan: Plan
    invocation_id: str
    state_dir: str
    unit_dir: str
    job_id: str
    endpoint_url: str | None = None
    agent_timeout: float = 30.0  # silence (no message, not even a heartbeat) that means loss
    attempt: int = 0  # the job's attempt (Slurm's SLURM_RESTART_COUNT), for the units
    rehearse: bool = False  # lanes run fake-vllm (ddsup start --rehearse)


@dataclass(frozen=True)
class Heartbeat:
    """Nothing to say but "still here": both sides of an agent's connection send it."""

    op: ClassVar[str] = "heartbeat"


HEARTBEAT = Heartbeat()  # it has no fields: one instance serves every beat


@dataclass(frozen=True)
class Start:
    """Start these instances of the agent's node (their first start, or after a stop)."""

    op: ClassVar[str] = "start"
    instances: tuple[str, ...]


@dataclass(frozen=True)
class Stop:
    """Stop these instances gracefully (``kill_signal``, SIGKILL after ``timeout_stop``)."""

    op: ClassVar[str] = "stop"
    instances: tuple[str, ...]
    reason: str = "stop requested"


@dataclass(frozen=True)
class Restart:
    """Stop these instances and start them again at once (``ddsup restart``)."""

    op: ClassVar[str] = "restart_instances"
    instances: tuple[str, ...]
    reason: str = "restart requested"


@dataclass(frozen=True)
class SignalInstances:
    """Send ``signum`` to these instances' processes (a signal ``ddsup start`` forwards)."""

    op: ClassVar[str] = "signal"
    instances: tuple[str, ...]
    signum: int

    def __post_init__(self) -> None:
        _check_signal(self.signum)


@dataclass(frozen=True)
class Kill:
    """SIGKILL everything at once (a second stop signal)."""

    op: ClassVar[str] = "kill"


@dataclass(frozen=True)
class Shutdown:
    """Stop every instance, then say :class:`AgentStopped` and exit."""

    op: ClassVar[str] = "shutdown"


@dataclass(frozen=True)
class TakeDown:
    """End these ranks' processes and hold them: a peer's ended, the replica restarts."""

    op: ClassVar[str] = "take_down"
    instances: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class Resume:
    """Start these held ranks again after ``delay`` seconds, as attempt ``attempt``.

    ``master_port`` None: the replica's rank 0 rendezvous on its planned port if that is
    free, else on one its node picks (and says so in its ``starting`` transition).
    """

    op: ClassVar[str] = "resume"
    instances: tuple[str, ...]
    delay: float
    attempt: int
    master_port: int | None = None

    def __post_init__(self) -> None:
        if not self.delay >= 0 or self.attempt < 0:
            raise ValueError("delay and attempt must not be negative")
        if self.master_port is not None and not 0 < self.master_port < 65536:
            raise ValueError("master_port must be from 1 to 65535")


@dataclass(frozen=True)
class FailHeld:
    """These held ranks' replica has failed for good (its start limit)."""

    op: ClassVar[str] = "fail_held"
    instances: tuple[str, ...]
    reason: str
    readiness_timeout: bool = False


@dataclass(frozen=True)
class PreflightReport:
    """What one node found: problems (none: passed), warnings, and the ports it picked."""

    op: ClassVar[str] = "preflight"
    node: str
    problems: tuple[str, ...] = ()
    ports: Mapping[str, int] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_name("node", self.node)
        if not all(0 < port < 65536 for port in self.ports.values()):
            raise ValueError("ports must be from 1 to 65535")


@dataclass(frozen=True)
class EventReport:
    """One event of the agent's node (a transition, a process, a probe), for the run's record."""

    op: ClassVar[str] = "event"
    event: NodeEvent  # an agent reports its node's events, never the run's lifecycle


@dataclass(frozen=True)
class Signalled:
    """The agent received a stop signal (``scancel``): the run is being stopped."""

    op: ClassVar[str] = "signalled"
    signum: int

    def __post_init__(self) -> None:
        _check_signal(self.signum)


@dataclass(frozen=True)
class AgentStopped:
    """The agent's instances are all down and every event before this one was sent."""

    op: ClassVar[str] = "stopped"
    node: str


AgentMessage = (
    Hello
    | Inventory
    | Setup
    | Heartbeat
    | Start
    | Stop
    | Restart
    | SignalInstances
    | TakeDown
    | Resume
    | FailHeld
    | Kill
    | Shutdown
    | PreflightReport
    | EventReport
    | Signalled
    | AgentStopped
)

TO_AGENT: tuple[type[Any], ...] = (
    Setup, Heartbeat, Start, Stop, Restart, SignalInstances, TakeDown, Resume, FailHeld, Kill,
    Shutdown,
)  # fmt: skip
"""What the controller sends an agent: all an agent's side decodes (``_agent_codec``)."""

FROM_AGENT: tuple[type[Any], ...] = (
    Hello, Inventory, Heartbeat, PreflightReport, EventReport, Signalled, AgentStopped,
)  # fmt: skip
