"""Structured events: every state change of a run, one typed value per kind.

``events.jsonl`` is the run's durable record (and what tests assert on, never log text):
one JSON object a line, in the shape docs/operating.md documents (fields are only ever
added). Every event has ``time`` (Unix seconds) and ``event``:

- ``unit``: :class:`UnitTransition`, an instance's state change;
- ``process``: :class:`ProcessStarted`; ``exit``: :class:`ProcessExited`, as seen;
- ``probe``: :class:`ProbeAnswered`, a readiness probe's answer changed while starting;
- ``liveness``: :class:`LivenessFailed`, a ready lane's liveness probe failed;
- ``containment``: :class:`Contained`, the no-orphan layers a supervisor holds on its node;
- ``run``: the run's own lifecycle, told apart by ``reason`` (:class:`RunStarting`,
  :class:`PreflightWarning`, :class:`RunEnding`, :class:`RunStopping`,
  :class:`SignalForwarded`, :class:`KillingEverything`, :class:`SweepLeftSurvivors`,
  :class:`RunFinished`).

``to_json`` writes a line's object (a ``TypedDict`` per kind: :data:`EventLine`);
``_event_parse`` reads one back (ValueError for
anything else); ``_event_log`` writes and reads the file, skipping lines it cannot parse
(the torn last line of a killed run). Values of environment variables never appear
here: no event has a field for them. The kinds a node emits are ``_node_events``' (an
agent imports only those), re-exported here.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass, field
from typing import Literal, TypedDict

from ddsup.record._node_events import COMPLETED as COMPLETED
from ddsup.record._node_events import NODE_EVENTS as NODE_EVENTS
from ddsup.record._node_events import Contained as Contained
from ddsup.record._node_events import LivenessFailed as LivenessFailed
from ddsup.record._node_events import NodeEvent as NodeEvent
from ddsup.record._node_events import NodeEventLine as NodeEventLine
from ddsup.record._node_events import ProbeAnswered as ProbeAnswered
from ddsup.record._node_events import ProcessExited as ProcessExited
from ddsup.record._node_events import ProcessStarted as ProcessStarted
from ddsup.record._node_events import UnitTransition as UnitTransition
from ddsup.record._outcome import Outcome, OutcomeJson


def _now() -> float:
    return time.time()


class RunHead(TypedDict):
    """What every ``run`` line has; which one it is, its ``reason`` says. ``stopping``
    and ``second stop signal: killing everything`` are only this."""

    time: float
    event: Literal["run"]
    reason: str


class StartingLine(RunHead):
    invocation_id: str


class PreflightLine(RunHead):
    node: str
    warning: str


class SignalLine(RunHead):  # ``forwarding SIGTERM`` …
    signal: str


class SurvivorsLine(RunHead):
    pids: list[int]


class OutcomeLine(RunHead, OutcomeJson):  # ``ending`` and ``finished``: as ``result.json``
    pass


RunLine = RunHead | StartingLine | PreflightLine | SignalLine | SurvivorsLine | OutcomeLine


@dataclass(frozen=True, kw_only=True)
class RunStarting:
    """``ddsup start`` began."""

    invocation_id: str
    time: float = field(default_factory=_now)
    reason = "starting"

    def to_json(self) -> StartingLine:
        return {**_run(self.time, self.reason), "invocation_id": self.invocation_id}


@dataclass(frozen=True, kw_only=True)
class PreflightWarning:
    """Preflight on ``node`` found something to say that does not stop the run."""

    node: str
    warning: str
    time: float = field(default_factory=_now)
    reason = "preflight warning"

    def to_json(self) -> PreflightLine:
        return {**_run(self.time, self.reason), "node": self.node, "warning": self.warning}


@dataclass(frozen=True, kw_only=True)
class RunEnding:
    """The first cause that ends the run."""

    outcome: Outcome
    time: float = field(default_factory=_now)
    reason = "ending"

    def to_json(self) -> OutcomeLine:
        return {**_run(self.time, self.reason), **self.outcome.to_dict()}


@dataclass(frozen=True, kw_only=True)
class RunStopping:
    """The stop sequence begins."""

    time: float = field(default_factory=_now)
    reason = "stopping"

    def to_json(self) -> RunHead:
        return _run(self.time, self.reason)


@dataclass(frozen=True, kw_only=True)
class SignalForwarded:
    """A signal in some unit's ``forward_signals`` is passed on to those units."""

    signum: int
    time: float = field(default_factory=_now)

    @property
    def reason(self) -> str:
        return f"forwarding {signal.Signals(self.signum).name}"

    def to_json(self) -> SignalLine:
        return {**_run(self.time, self.reason), "signal": signal.Signals(self.signum).name}


@dataclass(frozen=True, kw_only=True)
class KillingEverything:
    """A second stop signal while stopping: SIGKILL everything at once."""

    time: float = field(default_factory=_now)
    reason = "second stop signal: killing everything"

    def to_json(self) -> RunHead:
        return _run(self.time, self.reason)


@dataclass(frozen=True, kw_only=True)
class SweepLeftSurvivors:
    """Processes outlived the final sweep by invocation id."""

    pids: tuple[int, ...]
    time: float = field(default_factory=_now)
    reason = "sweep left survivors"

    def to_json(self) -> SurvivorsLine:
        return {**_run(self.time, self.reason), "pids": list(self.pids)}


@dataclass(frozen=True, kw_only=True)
class RunFinished:
    """The last line: the same as ``result.json``."""

    outcome: Outcome
    time: float = field(default_factory=_now)
    reason = "finished"

    def to_json(self) -> OutcomeLine:
        return {**_run(self.time, self.reason), **self.outcome.to_dict()}


RunLifecycle = (
    RunStarting
    | PreflightWarning
    | RunEnding
    | RunStopping
    | SignalForwarded
    | KillingEverything
    | SweepLeftSurvivors
    | RunFinished
)
RecordedEvent = NodeEvent | RunLifecycle
EventLine = NodeEventLine | RunLine
"""One line of ``events.jsonl``, told apart by its ``event``."""


def _run(at: float, reason: str) -> RunHead:
    return {"time": round(at, 6), "event": "run", "reason": reason}
