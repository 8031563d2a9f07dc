"""Every message that crosses the control channel, and the one encode/decode pair.

One frozen dataclass per message; on the wire each is one JSON object with an ``op``.
:func:`decode` checks every field's type and raises :class:`ChannelError` on anything
malformed or unknown, and the receiving side then drops that connection: no other
module handles the protocol as dictionaries. Who sends what::

    any peer → controller   Hello (the first line: role, secret)
    controller → agent      Setup, Start, Stop, SignalInstances, Kill, Shutdown
    agent → controller      PreflightReport, EventReport, Signalled, AgentStopped
    controller ⇄ agent      Heartbeat (every agent_timeout / 5, so that silence means loss)
    controller → endpoint   EndpointSetup (first), then LanesUpdate on every change
    operator ⇄ controller   StatusRequest → StatusReply; StopRequest → StopAnswer
"""

from __future__ import annotations

import dataclasses
import enum
import json
import reprlib
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ddsup._errors import DdsupError
from ddsup.channel._typed import from_json
from ddsup.plan._model import Plan
from ddsup.record._events import RecordedEvent, parse_event
from ddsup.record._status import RunSnapshot
from ddsup.units._model import EndpointSection


class ChannelError(DdsupError):
    """The peer broke the protocol, failed authentication, or vanished mid-message."""


class Role(str, enum.Enum):
    """Who is on the other end of a connection, as its hello says."""

    AGENT = "agent"
    LANES = "lanes"  # the endpoint's live lane feed
    CONTROL = "control"  # an operator command (status, stop)


MAX_NAME = 255  # a node name (a hostname) in a hello or a report


def _check_signal(signum: int) -> None:
    if signum not in _SIGNALS:
        raise ValueError(f"{signum} is not a signal number")


def _check_name(what: str, name: str) -> None:
    if not name or len(name) > MAX_NAME or not name.isprintable():
        raise ValueError(f"{what} must be 1 to {MAX_NAME} printable characters")


_SIGNALS = frozenset(int(s) for s in signal.valid_signals())


@dataclass(frozen=True)
class Hello:
    """The first line of every connection; ``secret`` authenticates it."""

    op: ClassVar[str] = "hello"
    role: Role
    secret: str = field(repr=False)
    node: str | None = None  # agents: the node they run on
    pid: int | None = None

    def __post_init__(self) -> None:
        if self.node is not None:
            _check_name("node", self.node)


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


@dataclass(frozen=True)
class Heartbeat:
    """Nothing to say but "still here": both sides of an agent's connection send it."""

    op: ClassVar[str] = "heartbeat"


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
class PreflightReport:
    """What one node found: problems (none: passed) and the ports it picked."""

    op: ClassVar[str] = "preflight"
    node: str
    problems: tuple[str, ...] = ()
    ports: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_name("node", self.node)
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
    """A lane the endpoint may route to; ``api_key_env`` names the variable holding the
    key to send it (its ``[lane] api_key_env``; the endpoint's environment has it)."""

    instance: str
    model: str
    url: str
    api_key_env: str | None = None


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
    | Setup
    | Heartbeat
    | Start
    | Stop
    | SignalInstances
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


# --- encode -------------------------------------------------------------------------------
def encode(message: Message) -> bytes:
    """One message as a JSON line's bytes (without the newline)."""
    return json.dumps({"op": message.op, **_fields(message)}, separators=(",", ":")).encode()


def _fields(message: Message) -> dict[str, Any]:
    if isinstance(message, Setup):
        facts = {f.name: getattr(message, f.name) for f in dataclasses.fields(message)}
        return {**facts, "plan": message.plan.to_dict()}
    if isinstance(message, EventReport):
        return {"event": message.event.to_json()}
    if isinstance(message, StatusReply):
        return {"snapshot": message.snapshot.to_json()}
    if isinstance(message, EndpointSetup):
        return {"section": dataclasses.asdict(message.section)}
    if isinstance(message, LanesUpdate):
        lanes = [dataclasses.asdict(lane) for lane in message.lanes]
        return {"lanes": lanes, "models": list(message.models)}
    if isinstance(message, Hello):
        return {k: v for k, v in dataclasses.asdict(message).items() if v is not None}
    return {k: _plain(v) for k, v in dataclasses.asdict(message).items()}


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, Mapping):
        return dict(value)
    return value


# --- decode -------------------------------------------------------------------------------
# What parsing hostile data can raise: json's RecursionError for deep nesting (a
# RuntimeError), LookupError and ArithmeticError from nested records' own parsers.
_PARSE_ERRORS = (
    ArithmeticError,
    AttributeError,
    LookupError,
    TypeError,
    ValueError,
    RecursionError,
)


def decode(line: bytes) -> Message:
    """The message on one line; ChannelError for anything malformed or unknown.

    Lines come from peers that may not have authenticated yet, so nothing a line holds
    may raise anything else: the property test in ``tests/hostile`` holds it to that.
    """
    try:
        data = json.loads(line)
    except (ValueError, RecursionError) as err:
        raise ChannelError(f"malformed message: {_short(err)}") from err
    if not isinstance(data, dict):
        raise ChannelError("malformed message: not an object")
    op = data.pop("op", None)
    kind = _BY_OP.get(op) if isinstance(op, str) else None
    if kind is None:
        raise ChannelError(f"unknown message {reprlib.repr(op)}")
    try:
        return _decode(kind, data)
    except _PARSE_ERRORS as err:
        raise ChannelError(f"malformed {op!r} message: {_short(err)}") from err


def _short(err: BaseException) -> str:
    """An error's text, cut short: it may quote what a hostile peer sent."""
    text = str(err)
    return text if len(text) <= 200 else text[:200] + "…"


def _decode(kind: type[Message], data: dict[str, Any]) -> Message:
    special = _SPECIAL.get(kind)
    if special is not None:
        return special(data)
    return from_json(kind, data)  # type: ignore[no-any-return]


def _setup(data: dict[str, Any]) -> Setup:
    plan = data.get("plan")
    if not isinstance(plan, dict):
        raise ValueError("plan must be an object")
    setup: Setup = from_json(Setup, data, parsers={"plan": Plan.from_dict})
    return setup


def _endpoint_setup(data: dict[str, Any]) -> EndpointSetup:
    section = data.get("section")
    if set(data) != {"section"} or not isinstance(section, dict):
        raise ValueError("it carries one section object")
    return EndpointSetup(from_json(EndpointSection, section))


def _object_parser(parse: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``parse`` for a field that must hold a JSON object (a nested record's own format)."""

    def read(value: Any) -> Any:
        if not isinstance(value, dict):
            raise ValueError(f"expected an object, not {reprlib.repr(value)}")
        return parse(value)

    return read


_SPECIAL: dict[type[Any], Callable[[dict[str, Any]], Message]] = {
    Setup: _setup,
    EndpointSetup: _endpoint_setup,
    EventReport: lambda data: from_json(
        EventReport, data, parsers={"event": _object_parser(parse_event)}
    ),
    StatusReply: lambda data: from_json(
        StatusReply, data, parsers={"snapshot": _object_parser(RunSnapshot.from_json)}
    ),
}
MESSAGES: tuple[type[Any], ...] = (
    Hello,
    Setup,
    Heartbeat,
    Start,
    Stop,
    SignalInstances,
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
_BY_OP: dict[str, type[Any]] = {kind.op: kind for kind in MESSAGES}
