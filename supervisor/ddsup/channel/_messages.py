"""Every message that crosses the control channel, and the one encode/decode pair.

One frozen dataclass per message; on the wire each is one JSON object with an ``op``
(``_codec``: :func:`~ddsup.channel._codec.decode` checks every field's type and raises
:class:`ChannelError` on anything malformed or unknown, and the receiving side then drops
that connection: no other module handles the protocol as dictionaries). Who sends what::

    any peer → controller   Hello (the first line: role, secret)
    agent → controller      Inventory (right after its hello: the node's GPUs)
    controller → agent      Setup, Start, Stop, SignalInstances, Kill, Shutdown,
                            TakeDown, Resume, FailHeld (a multi-node replica's restart)
    agent → controller      PreflightReport, EventReport, Signalled, AgentStopped
    controller → endpoint   EndpointSetup (first), then LanesUpdate on every change
    operator ⇄ controller   StatusRequest → StatusReply; StopRequest → StopAnswer
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ddsup._errors import DdsupError
from ddsup.plan._model import Plan
from ddsup.record._events import RecordedEvent
from ddsup.record._status import RunSnapshot
from ddsup.units._model import EndpointSection


class ChannelError(DdsupError):
    """The peer broke the protocol, failed authentication, or vanished mid-message."""


class Role(str, enum.Enum):
    """Who is on the other end of a connection, as its hello says."""

    AGENT = "agent"
    LANES = "lanes"  # the endpoint's live lane feed
    CONTROL = "control"  # an operator command (status, stop)


@dataclass(frozen=True)
class Hello:
    """The first line of every connection; ``secret`` authenticates it."""

    op: ClassVar[str] = "hello"
    role: Role
    secret: str = field(repr=False)
    node: str | None = None  # agents: the node they run on
    pid: int | None = None


@dataclass(frozen=True)
class Inventory:
    """What an agent found on its node, sent right after its hello, before any plan.

    ``gpus`` are the entries the job was given there (``CUDA_VISIBLE_DEVICES`` entries),
    ``source`` where they were found; the plan is made from every node's inventory.
    """

    op: ClassVar[str] = "inventory"
    gpus: tuple[str, ...]
    source: str


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


@dataclass(frozen=True)
class Start:
    op: ClassVar[str] = "start"
    instances: tuple[str, ...]


@dataclass(frozen=True)
class Stop:
    op: ClassVar[str] = "stop"
    instances: tuple[str, ...]
    reason: str = "stop requested"


@dataclass(frozen=True)
class SignalInstances:
    op: ClassVar[str] = "signal"
    instances: tuple[str, ...]
    signum: int


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


@dataclass(frozen=True)
class EventReport:
    op: ClassVar[str] = "event"
    event: RecordedEvent


@dataclass(frozen=True)
class Signalled:
    """The agent received a stop signal (``scancel``): the run is being stopped."""

    op: ClassVar[str] = "signalled"
    signum: int


@dataclass(frozen=True)
class AgentStopped:
    """The agent's instances are all down and every event before this one was sent."""

    op: ClassVar[str] = "stopped"
    node: str


@dataclass(frozen=True)
class EndpointSetup:
    """The ``[endpoint]`` section of the run's endpoint unit (``api_key_env`` is a name)."""

    op: ClassVar[str] = "endpoint"
    section: EndpointSection


@dataclass(frozen=True)
class ReadyLane:
    instance: str
    model: str
    url: str


@dataclass(frozen=True)
class LanesUpdate:
    """The full set of ready lanes, and every model the run serves."""

    op: ClassVar[str] = "lanes"
    lanes: tuple[ReadyLane, ...] = ()
    models: tuple[str, ...] = ()


@dataclass(frozen=True)
class StatusRequest:
    op: ClassVar[str] = "status"


@dataclass(frozen=True)
class StatusReply:
    op: ClassVar[str] = "status_reply"
    snapshot: RunSnapshot


@dataclass(frozen=True)
class StopRequest:
    """``ddsup stop``: like SIGTERM to ``ddsup start``."""

    op: ClassVar[str] = "stop_run"


@dataclass(frozen=True)
class StopAnswer:
    op: ClassVar[str] = "stopping"


Message = (
    Hello
    | Inventory
    | Setup
    | Start
    | Stop
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
    | EndpointSetup
    | LanesUpdate
    | StatusRequest
    | StatusReply
    | StopRequest
    | StopAnswer
)


MESSAGES: tuple[type[Any], ...] = (
    Hello,
    Inventory,
    Setup,
    Start,
    Stop,
    SignalInstances,
    TakeDown,
    Resume,
    FailHeld,
    Kill,
    Shutdown,
    PreflightReport,
    EventReport,
    Signalled,
    AgentStopped,
    EndpointSetup,
    LanesUpdate,
    StatusRequest,
    StatusReply,
    StopRequest,
    StopAnswer,
)
