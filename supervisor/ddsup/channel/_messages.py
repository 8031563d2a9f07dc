"""Every message that crosses the control channel (``_codec`` puts them on the wire).

One frozen dataclass per message; on the wire each is one JSON object with an ``op``.
:func:`~ddsup.channel._codec.decode` checks every field's type and raises
:class:`ChannelError` on anything malformed or unknown, and the receiving side then drops
that connection: no other module handles the protocol as dictionaries. Who sends what::

    any peer → controller   Hello (the first line: role, secret)
    agent → controller      Inventory (right after its hello: the node's GPUs)
    controller → agent      Setup, Start, Stop, Restart, SignalInstances, Kill, Shutdown,
                            TakeDown, Resume, FailHeld (a multi-node replica's restart)
    agent → controller      PreflightReport, EventReport, Signalled, AgentStopped
    controller ⇄ agent      Heartbeat (every agent_timeout / 3 from the controller, each
                            answered by the agent: silence means loss; ``_heartbeat``)
    controller → endpoint   EndpointSetup (first), LanesUpdate (every ready lane), then
                            LanesChanged (the lanes that came and went) on every change
    endpoint → controller   LaneDrained (a lane out of the rotation has nothing in flight)
    operator ⇄ controller   StatusRequest → StatusReply; StopRequest → StopAnswer;
                            RestartRequest → RestartAnswer, RestartProgress…, RestartOver
                            (``_operator_messages``, re-exported here)
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ddsup.channel._hello import MAX_LINE as MAX_LINE
from ddsup.channel._hello import MAX_NAME as MAX_NAME
from ddsup.channel._hello import ChannelError as ChannelError
from ddsup.channel._hello import Hello as Hello
from ddsup.channel._hello import Role as Role
from ddsup.channel._hello import check_name
from ddsup.channel._operator_messages import RestartAnswer as RestartAnswer
from ddsup.channel._operator_messages import RestartOver as RestartOver
from ddsup.channel._operator_messages import RestartProgress as RestartProgress
from ddsup.channel._operator_messages import RestartRequest as RestartRequest
from ddsup.channel._operator_messages import RestartStep as RestartStep
from ddsup.channel._operator_messages import StatusReply as StatusReply
from ddsup.channel._operator_messages import StatusRequest as StatusRequest
from ddsup.channel._operator_messages import StopAnswer as StopAnswer
from ddsup.channel._operator_messages import StopRequest as StopRequest
from ddsup.plan._model import Plan
from ddsup.record._events import RecordedEvent
from ddsup.units._model import EndpointSection


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
    op: ClassVar[str] = "start"
    instances: tuple[str, ...]


@dataclass(frozen=True)
class Stop:
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
    op: ClassVar[str] = "event"
    event: RecordedEvent


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


@dataclass(frozen=True)
class EndpointSetup:
    """The ``[endpoint]`` section of the run's endpoint unit (``api_key_env`` is a name)."""

    op: ClassVar[str] = "endpoint"
    section: EndpointSection


@dataclass(frozen=True)
class ReadyLane:
    """One lane in the rotation. ``served_names``: every model name it answers to (its
    ``model`` first, then vLLM aliases and LoRA adapters), for routing by any of them;
    ``api_key_env`` names the variable holding the key to send it (its ``[lane]
    api_key_env``; the endpoint's environment has it)."""

    instance: str
    model: str
    url: str
    served_names: tuple[str, ...] = ()
    api_key_env: str | None = None


@dataclass(frozen=True)
class LanesUpdate:
    """The full set of ready lanes, every model the run serves (``[lane] model``), and
    every name any lane answers to (``served_names``: models, aliases, adapters)."""

    op: ClassVar[str] = "lanes"
    lanes: tuple[ReadyLane, ...] = ()
    models: tuple[str, ...] = ()
    served_names: tuple[str, ...] = ()


@dataclass(frozen=True)
class LaneDrained:
    """The endpoint has ``instance`` out of its rotation and no request in flight to it."""

    op: ClassVar[str] = "drained"
    instance: str


@dataclass(frozen=True)
class LanesChanged:
    """The lanes that joined and left the ready set since the feed's previous message
    (after one full :class:`LanesUpdate`: 1,024 lanes as full sets were 0.5 M records)."""

    op: ClassVar[str] = "lanes_changed"
    added: tuple[ReadyLane, ...] = ()
    removed: tuple[str, ...] = ()  # instance names


Message = (
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
    | EndpointSetup
    | LanesUpdate
    | LanesChanged
    | StatusRequest
    | StatusReply
    | StopRequest
    | StopAnswer
    | LaneDrained
    | RestartRequest
    | RestartAnswer
    | RestartProgress
    | RestartOver
)


MESSAGES: tuple[type[Any], ...] = (
    Hello, Inventory, Setup, Heartbeat, Start, Stop, SignalInstances, TakeDown, Resume,
    FailHeld, Kill, Shutdown, PreflightReport, EventReport, Signalled, AgentStopped,
    EndpointSetup, LanesUpdate, LanesChanged, StatusRequest, StatusReply, StopRequest,
    StopAnswer, Restart, LaneDrained, RestartRequest, RestartAnswer, RestartProgress, RestartOver,
)  # fmt: skip
"""Every kind of message, each with a unique ``op`` (``tests/run/test_channel_messages.py``)."""
