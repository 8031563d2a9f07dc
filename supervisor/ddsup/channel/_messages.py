"""Every message that crosses the control channel, and the one encode/decode pair.

One frozen dataclass per message; on the wire each is one JSON object with an ``op``.
:func:`decode` checks every field's type and raises :class:`ChannelError` on anything
malformed or unknown, and the receiving side then drops that connection: no other
module handles the protocol as dictionaries. Who sends what::

    any peer → controller   Hello (the first line: role, secret)
    controller → agent      Setup, Start, Stop, SignalInstances, Kill, Shutdown
    agent → controller      PreflightReport, EventReport, Signalled, AgentStopped
    controller → endpoint   EndpointSetup (first), LanesUpdate (every ready lane), then
                            LanesChanged (the lanes that came and went) on every change
    operator ⇄ controller   StatusRequest → StatusReply; StopRequest → StopAnswer
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ddsup._errors import DdsupError
from ddsup.plan._model import Plan
from ddsup.record._events import RecordedEvent, parse_event
from ddsup.record._status import RunSnapshot
from ddsup.units._model import EndpointSection

MAX_LINE = 16 * 1024 * 1024  # the longest message a peer may send


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
class PreflightReport:
    """What one node found: problems (none: passed) and the ports it picked."""

    op: ClassVar[str] = "preflight"
    node: str
    problems: tuple[str, ...] = ()
    ports: Mapping[str, int] = field(default_factory=dict)


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
class LanesChanged:
    """The lanes that joined and left the ready set since the feed's previous message
    (after one full :class:`LanesUpdate`: 1,024 lanes as full sets were 0.5 M records)."""

    op: ClassVar[str] = "lanes_changed"
    added: tuple[ReadyLane, ...] = ()
    removed: tuple[str, ...] = ()  # instance names


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
    | LanesChanged
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
        return {"lanes": _lanes(message.lanes), "models": list(message.models)}
    if isinstance(message, LanesChanged):
        return {"added": _lanes(message.added), "removed": list(message.removed)}
    if isinstance(message, Hello):
        return {k: v for k, v in dataclasses.asdict(message).items() if v is not None}
    return {k: _plain(v) for k, v in dataclasses.asdict(message).items()}


def _lanes(lanes: tuple[ReadyLane, ...]) -> list[dict[str, str]]:
    return [{"instance": x.instance, "model": x.model, "url": x.url} for x in lanes]


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, Mapping):
        return dict(value)
    return value


# --- decode -------------------------------------------------------------------------------
def decode(line: bytes) -> Message:
    """The message on one line; ChannelError for anything malformed or unknown."""
    try:
        data = json.loads(line)
    except ValueError as err:
        raise ChannelError(f"malformed message: {err}") from err
    if not isinstance(data, dict):
        raise ChannelError("malformed message: not an object")
    op = data.pop("op", None)
    kind = _BY_OP.get(op) if isinstance(op, str) else None
    if kind is None:
        raise ChannelError(f"unknown message {op!r}")
    try:
        return _decode(kind, data)
    except ChannelError:
        raise
    except (AttributeError, KeyError, TypeError, ValueError) as err:
        raise ChannelError(f"malformed {op!r} message: {err}") from err


def _decode(kind: type[Message], data: dict[str, Any]) -> Message:
    special = _SPECIAL.get(kind)
    if special is not None:
        return special(data)
    return _dataclass(kind, data)  # type: ignore[no-any-return]


def _setup(data: dict[str, Any]) -> Setup:
    plan = data.get("plan")
    if not isinstance(plan, dict):
        raise ChannelError("malformed 'setup' message: plan must be an object")
    setup: Setup = _dataclass(Setup, data, parsers={"plan": Plan.from_dict})
    return setup


def _endpoint_setup(data: dict[str, Any]) -> EndpointSetup:
    section = data.get("section")
    if set(data) != {"section"} or not isinstance(section, dict):
        raise ChannelError("malformed 'endpoint' message: it carries one section object")
    return EndpointSetup(_dataclass(EndpointSection, section))


def _object_parser(parse: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``parse`` for a field that must hold a JSON object (a nested record's own format)."""

    def read(value: Any) -> Any:
        if not isinstance(value, dict):
            raise ChannelError(f"expected an object, not {value!r}")
        return parse(value)

    return read


_SPECIAL: dict[type[Any], Callable[[dict[str, Any]], Message]] = {
    Setup: _setup,
    EndpointSetup: _endpoint_setup,
    EventReport: lambda data: _dataclass(
        EventReport, data, parsers={"event": _object_parser(parse_event)}
    ),
    StatusReply: lambda data: _dataclass(
        StatusReply, data, parsers={"snapshot": _object_parser(RunSnapshot.from_json)}
    ),
}
MESSAGES: tuple[type[Any], ...] = (
    Hello,
    Setup,
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
    LanesChanged,
    StatusRequest,
    StatusReply,
    StopRequest,
    StopAnswer,
)
_BY_OP: dict[str, type[Any]] = {kind.op: kind for kind in MESSAGES}


def _dataclass(
    kind: type,
    data: Mapping[str, Any],
    parsers: Mapping[str, Callable[[Any], Any]] | None = None,
) -> Any:
    """A frozen dataclass from ``data``: every field checked against its annotation.

    ``parsers`` read fields that have a format of their own (the plan, an event). Missing
    fields take their defaults (a peer of an older version); unknown ones are an error,
    so a typo or a newer peer's field never passes silently.
    """
    hints, fields = _shape(kind)
    unknown = set(data) - set(fields)
    if unknown:
        raise ChannelError(f"unknown fields {sorted(unknown)}")
    values = {}
    for name, spec in fields.items():
        if name in data:
            parse = (parsers or {}).get(name)
            values[name] = parse(data[name]) if parse else _typed(name, hints[name], data[name])
        elif spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING:
            raise ChannelError(f"missing field {name!r}")
    return kind(**values)


@functools.cache
def _shape(kind: type) -> tuple[dict[str, Any], dict[str, dataclasses.Field[Any]]]:
    """A class's field types and fields, once: ``get_type_hints`` evaluates annotation
    strings on every call (~40 µs), and a lane feed decoded every lane record with it."""
    return typing.get_type_hints(kind), {f.name: f for f in dataclasses.fields(kind)}


def _typed(name: str, hint: Any, value: Any) -> Any:
    """``value`` as ``hint`` (str, int, float, bool, enums, ``X | None``, tuples, mappings)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _typed(name, inner[0], value)
    if origin is tuple:
        if not isinstance(value, list):
            raise ChannelError(f"{name!r} must be a list")
        return tuple(_typed(name, args[0], item) for item in value)
    if origin in (Mapping, dict) or hint is Mapping:
        if not isinstance(value, dict):
            raise ChannelError(f"{name!r} must be an object")
        return {str(k): _typed(name, args[1], v) for k, v in value.items()}
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        if not isinstance(value, dict):
            raise ChannelError(f"{name!r} must be an object")
        return _dataclass(hint, value)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint(value)
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint in (str, int, float, bool) and type(value) is hint:
        return value
    raise ChannelError(f"{name!r} must be {getattr(hint, '__name__', hint)}, not {value!r}")
