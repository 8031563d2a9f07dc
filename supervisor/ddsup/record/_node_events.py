"""The events a node emits: its instances' transitions, processes and probes, and the
containment its supervisor holds there.

Apart from the run's own lifecycle (``_events``: ``ddsup start``'s alone, which
re-exports these) because a node agent emits only these, and every frozen dataclass
costs its start-up the compiling of each generated method: an agent creates these six,
not the fourteen of every kind. The shapes are
``_events``' docstring's and docs/operating.md's; each kind's line is a ``TypedDict``
(``UnitLine`` …), written by its ``to_json`` and read back by ``_event_parse``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, TypedDict, cast

from ddsup._exit import ExitJson, ExitStatus
from ddsup._json import Json
from ddsup.record._states import InstanceState

if TYPE_CHECKING:  # typing's own from Python 3.11; these annotations are never evaluated
    from typing_extensions import NotRequired

COMPLETED = "completed"  # the reason of a oneshot's exited transition when it succeeded


def _now() -> float:
    return time.time()


_Move = TypedDict("_Move", {"from": str, "to": str})  # ``from`` is a keyword


class _UnitDetails(TypedDict, total=False):
    """What a ``unit`` line says only when it applies."""

    pid: int
    exit: ExitJson
    readiness_timeout: bool
    probe: str
    attempt: int
    attempt_limit: int
    master_port: int
    until: float


class UnitLine(_Move, _UnitDetails):
    """A ``unit`` event's line (:class:`UnitTransition`)."""

    time: float
    event: Literal["unit"]
    instance: str
    node: NotRequired[str]
    reason: str
    restarts: int


class ProbeLine(TypedDict):
    """A ``probe`` event's line (:class:`ProbeAnswered`)."""

    time: float
    event: Literal["probe"]
    instance: str
    node: NotRequired[str]
    answer: str


class _LogOffset(TypedDict, total=False):
    log_offset: int  # the process's log's size when it started


class ProcessLine(_LogOffset):
    """A ``process`` event's line (:class:`ProcessStarted`)."""

    time: float
    event: Literal["process"]
    instance: str
    node: NotRequired[str]
    pid: int


class ExitLine(TypedDict):
    """An ``exit`` event's line (:class:`ProcessExited`)."""

    time: float
    event: Literal["exit"]
    instance: str
    node: NotRequired[str]
    reason: str
    pid: int
    exit: ExitJson


class LivenessLine(TypedDict):
    """A ``liveness`` event's line (:class:`LivenessFailed`)."""

    time: float
    event: Literal["liveness"]
    instance: str
    node: NotRequired[str]
    failures: int
    limit: int
    probe: str
    reason: str


class ContainmentLine(TypedDict):
    """A ``containment`` event's line (:class:`Contained`): its ``details`` are keys of
    the line itself, as ``ddsup.process`` describes the layers (docs/no-orphans.md)."""

    time: float
    event: Literal["containment"]
    node: NotRequired[str]
    supervisor: str
    reason: str
    pid: NotRequired[Json]
    machine: NotRequired[Json]
    layers: NotRequired[Json]
    subreaper: NotRequired[Json]
    sentinel: NotRequired[Json]
    sentinel_of: NotRequired[Json]
    registry: NotRequired[Json]
    registry_reason: NotRequired[Json]
    cgroup: NotRequired[Json]
    cgroup_reason: NotRequired[Json]


NodeEventLine = UnitLine | ProbeLine | ProcessLine | ExitLine | LivenessLine | ContainmentLine


@dataclass(frozen=True, kw_only=True)
class UnitTransition:
    """An instance moved from one state to another, and why.

    ``probe`` is its readiness probe's last answer (``ok`` once it passed, ``HTTP 503`` …
    when it timed out) in the current start; ``readiness_timeout`` marks the verdict of a
    start that was not ready within ``timeout_start`` (``restarting``, or ``failed``:
    then the run ends 75). ``attempt`` is which attempt at becoming ready the current
    start is, of ``attempt_limit`` (``start_limit_burst``); ``master_port`` the
    rendezvous port of a multi-node lane's rank in this start; ``until`` (Unix time) when
    a ``waiting`` instance's stagger turn comes.
    """

    instance: str
    node: str | None
    from_state: InstanceState
    to_state: InstanceState
    reason: str
    restarts: int = 0
    pid: int | None = None
    exit: ExitStatus | None = None
    readiness_timeout: bool = False
    probe: str | None = None
    attempt: int | None = None
    attempt_limit: int | None = None
    master_port: int | None = None
    until: float | None = None
    time: float = field(default_factory=_now)

    @property
    def completed(self) -> bool:
        """A oneshot that finished its work: what units ``after`` it wait for."""
        return self.to_state is InstanceState.EXITED and self.reason == COMPLETED

    def to_json(self) -> UnitLine:
        out: _UnitDetails = {}
        if self.pid is not None:
            out["pid"] = self.pid
        if self.exit is not None:
            out["exit"] = self.exit.to_json()
        if self.readiness_timeout:
            out["readiness_timeout"] = True
        if self.probe is not None:
            out["probe"] = self.probe
        if self.attempt is not None:
            out["attempt"] = self.attempt
        if self.attempt_limit is not None:
            out["attempt_limit"] = self.attempt_limit
        if self.master_port is not None:
            out["master_port"] = self.master_port
        if self.until is not None:
            out["until"] = round(self.until, 3)
        return {
            "time": round(self.time, 6),
            "event": "unit",
            "instance": self.instance,
            **_node(self.node),
            "from": self.from_state.value,
            "to": self.to_state.value,
            "reason": self.reason,
            "restarts": self.restarts,
            **out,
        }


@dataclass(frozen=True, kw_only=True)
class ProbeAnswered:
    """An instance's readiness probe answered differently than before, while it starts.

    Written only when the answer changes (``connection refused`` → ``HTTP 503`` → …), so
    a lane that loads for twenty minutes adds a handful of lines, not one per probe.
    """

    instance: str
    node: str | None
    answer: str
    time: float = field(default_factory=_now)

    def to_json(self) -> ProbeLine:
        return {
            "time": round(self.time, 6),
            "event": "probe",
            "instance": self.instance,
            **_node(self.node),
            "answer": self.answer,
        }


@dataclass(frozen=True, kw_only=True)
class ProcessStarted:
    """A process of ``instance`` started; ``log_offset``: its log's size at that moment."""

    instance: str
    node: str | None
    pid: int
    log_offset: int | None = None
    time: float = field(default_factory=_now)

    def to_json(self) -> ProcessLine:
        offset: _LogOffset = {} if self.log_offset is None else {"log_offset": self.log_offset}
        return {
            "time": round(self.time, 6),
            "event": "process",
            "instance": self.instance,
            **_node(self.node),
            "pid": self.pid,
            **offset,
        }


@dataclass(frozen=True, kw_only=True)
class ProcessExited:
    """A process of ``instance`` ended on its own, stamped the moment ddsup saw it."""

    instance: str
    node: str | None
    pid: int
    exit: ExitStatus
    time: float = field(default_factory=_now)

    @property
    def reason(self) -> str:
        return self.exit.describe()

    def to_json(self) -> ExitLine:
        return {
            "time": round(self.time, 6),
            "event": "exit",
            "instance": self.instance,
            **_node(self.node),
            "reason": self.reason,
            "pid": self.pid,
            "exit": self.exit.to_json(),
        }


@dataclass(frozen=True, kw_only=True)
class LivenessFailed:
    """A ready lane did not pass its liveness probe: ``failures`` in a row of ``limit``.

    The first takes it out of the rotation (``ready`` → ``unresponsive``); the
    ``limit``-th restarts it (``unresponsive`` → ``restarting``), by its restart policy.
    ``probe`` is the probe's answer (``no answer within 5s``, ``HTTP 500``, …).
    """

    instance: str
    node: str | None
    failures: int
    limit: int
    probe: str
    time: float = field(default_factory=_now)

    @property
    def reason(self) -> str:
        return f"liveness probe failed ({self.failures} of {self.limit} in a row): {self.probe}"

    def to_json(self) -> LivenessLine:
        return {
            "time": round(self.time, 6),
            "event": "liveness",
            "instance": self.instance,
            **_node(self.node),
            "failures": self.failures,
            "limit": self.limit,
            "probe": self.probe,
            "reason": self.reason,
        }


@dataclass(frozen=True, kw_only=True)
class Contained:
    """The no-orphan layers one supervisor (``ddsup start`` or an agent) holds on its node.

    ``layers`` names them strongest first; ``details`` is their description as
    ``ddsup.process`` gives it (cgroup paths, registry file, why there is no cgroup).
    """

    node: str | None
    supervisor: str
    summary: str
    details: Mapping[str, Json] = field(default_factory=dict)
    time: float = field(default_factory=_now)

    def to_json(self) -> ContainmentLine:
        out: dict[str, Json] = {"time": round(self.time, 6), "event": "containment"}
        if self.node is not None:
            out["node"] = self.node
        out.update(self.details)  # open: what ``ddsup.process`` says of its layers
        out.update({"supervisor": self.supervisor, "reason": self.summary})
        return cast("ContainmentLine", out)


NodeEvent = (
    UnitTransition | ProbeAnswered | ProcessStarted | ProcessExited | LivenessFailed | Contained
)
NODE_EVENTS = (
    UnitTransition,
    ProbeAnswered,
    ProcessStarted,
    ProcessExited,
    LivenessFailed,
    Contained,
)
"""The kinds an agent may report (``EventReport``): the run's lifecycle is the controller's."""


class NodeKey(TypedDict, total=False):
    """The ``node`` of a line: none for the head node."""

    node: str


def _node(node: str | None) -> NodeKey:
    """The ``node`` key of a line, in its place after ``instance``; none for the head node."""
    return {} if node is None else {"node": node}
