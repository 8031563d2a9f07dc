"""Structured events: every state change of a run, one typed value per kind.

``events.jsonl`` is the run's durable record (and what tests assert on, never log text):
one JSON object a line, in the shape docs/operating.md documents (fields are only ever
added). Every event has ``time`` (Unix seconds) and ``event``:

- ``unit``: :class:`UnitTransition`, an instance's state change;
- ``process``: :class:`ProcessStarted`; ``exit``: :class:`ProcessExited`, as seen;
- ``liveness``: :class:`LivenessFailed`, a ready lane's liveness probe failed;
- ``containment``: :class:`Contained`, the no-orphan layers a supervisor holds on its node;
- ``run``: the run's own lifecycle, told apart by ``reason`` (:class:`RunStarting`,
  :class:`RunEnding`, :class:`RunStopping`, :class:`SignalForwarded`,
  :class:`KillingEverything`, :class:`SweepLeftSurvivors`, :class:`RunFinished`).

``to_json`` writes a line's object, :func:`parse_event` reads one back (ValueError for
anything else); ``_event_log`` writes and reads the file, skipping lines it cannot parse
(the torn last line of a killed run). Values of environment variables never appear
here: no event has a field for them.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ddsup._exit import ExitStatus
from ddsup.record._outcome import Outcome, exit_from_json
from ddsup.record._states import InstanceState

COMPLETED = "completed"  # the reason of a oneshot's exited transition when it succeeded


def _now() -> float:
    return time.time()


@dataclass(frozen=True, kw_only=True)
class UnitTransition:
    """An instance moved from one state to another, and why.

    ``probe`` is its readiness probe's last answer (``ok`` once it passed, ``HTTP 503`` …
    when it timed out) in the current start; ``readiness_timeout`` marks the verdict of a
    start that was not ready within ``timeout_start`` (``restarting``, or ``failed``:
    then the run ends 75).
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
    time: float = field(default_factory=_now)

    @property
    def completed(self) -> bool:
        """A oneshot that finished its work: what units ``after`` it wait for."""
        return self.to_state is InstanceState.EXITED and self.reason == COMPLETED

    def to_json(self) -> dict[str, Any]:
        out = _head(self.time, "unit", self.instance, self.node)
        out.update({"from": self.from_state.value, "to": self.to_state.value})
        out.update({"reason": self.reason, "restarts": self.restarts})
        if self.pid is not None:
            out["pid"] = self.pid
        if self.exit is not None:
            out["exit"] = self.exit.to_json()
        if self.readiness_timeout:
            out["readiness_timeout"] = True
        if self.probe is not None:
            out["probe"] = self.probe
        return out


@dataclass(frozen=True, kw_only=True)
class ProcessStarted:
    """A process of ``instance`` started; ``log_offset``: its log's size at that moment."""

    instance: str
    node: str | None
    pid: int
    log_offset: int | None = None
    time: float = field(default_factory=_now)

    def to_json(self) -> dict[str, Any]:
        out = {**_head(self.time, "process", self.instance, self.node), "pid": self.pid}
        if self.log_offset is not None:
            out["log_offset"] = self.log_offset
        return out


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

    def to_json(self) -> dict[str, Any]:
        out = _head(self.time, "exit", self.instance, self.node)
        return {**out, "reason": self.reason, "pid": self.pid, "exit": self.exit.to_json()}


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

    def to_json(self) -> dict[str, Any]:
        out = _head(self.time, "liveness", self.instance, self.node)
        out.update({"failures": self.failures, "limit": self.limit, "probe": self.probe})
        return {**out, "reason": self.reason}


@dataclass(frozen=True, kw_only=True)
class RunStarting:
    """``ddsup start`` began."""

    invocation_id: str
    time: float = field(default_factory=_now)
    reason = "starting"

    def to_json(self) -> dict[str, Any]:
        return {**_run(self.time, self.reason), "invocation_id": self.invocation_id}


@dataclass(frozen=True, kw_only=True)
class RunEnding:
    """The first cause that ends the run."""

    outcome: Outcome
    time: float = field(default_factory=_now)
    reason = "ending"

    def to_json(self) -> dict[str, Any]:
        return {**_run(self.time, self.reason), **self.outcome.to_dict()}


@dataclass(frozen=True, kw_only=True)
class RunStopping:
    """The stop sequence begins."""

    time: float = field(default_factory=_now)
    reason = "stopping"

    def to_json(self) -> dict[str, Any]:
        return _run(self.time, self.reason)


@dataclass(frozen=True, kw_only=True)
class SignalForwarded:
    """A signal in some unit's ``forward_signals`` is passed on to those units."""

    signum: int
    time: float = field(default_factory=_now)

    @property
    def reason(self) -> str:
        return f"forwarding {signal.Signals(self.signum).name}"

    def to_json(self) -> dict[str, Any]:
        return {**_run(self.time, self.reason), "signal": signal.Signals(self.signum).name}


@dataclass(frozen=True, kw_only=True)
class KillingEverything:
    """A second stop signal while stopping: SIGKILL everything at once."""

    time: float = field(default_factory=_now)
    reason = "second stop signal: killing everything"

    def to_json(self) -> dict[str, Any]:
        return _run(self.time, self.reason)


@dataclass(frozen=True, kw_only=True)
class SweepLeftSurvivors:
    """Processes outlived the final sweep by invocation id."""

    pids: tuple[int, ...]
    time: float = field(default_factory=_now)
    reason = "sweep left survivors"

    def to_json(self) -> dict[str, Any]:
        return {**_run(self.time, self.reason), "pids": list(self.pids)}


@dataclass(frozen=True, kw_only=True)
class RunFinished:
    """The last line: the same as ``result.json``."""

    outcome: Outcome
    time: float = field(default_factory=_now)
    reason = "finished"

    def to_json(self) -> dict[str, Any]:
        return {**_run(self.time, self.reason), **self.outcome.to_dict()}


@dataclass(frozen=True, kw_only=True)
class Contained:
    """The no-orphan layers one supervisor (``ddsup start`` or an agent) holds on its node.

    ``layers`` names them strongest first; ``details`` is their description as
    ``ddsup.process`` gives it (cgroup paths, registry file, why there is no cgroup).
    """

    node: str | None
    supervisor: str
    summary: str
    details: Mapping[str, Any] = field(default_factory=dict)
    time: float = field(default_factory=_now)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"time": round(self.time, 6), "event": "containment"}
        if self.node is not None:
            out["node"] = self.node
        return {**out, **self.details, "supervisor": self.supervisor, "reason": self.summary}


RunLifecycle = (
    RunStarting
    | RunEnding
    | RunStopping
    | SignalForwarded
    | KillingEverything
    | SweepLeftSurvivors
    | RunFinished
)
RecordedEvent = (
    UnitTransition | ProcessStarted | ProcessExited | LivenessFailed | Contained | RunLifecycle
)


def _head(at: float, kind: str, instance: str, node: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {"time": round(at, 6), "event": kind, "instance": instance}
    if node is not None:
        out["node"] = node
    return out


def _run(at: float, reason: str) -> dict[str, Any]:
    return {"time": round(at, 6), "event": "run", "reason": reason}


# --- reading back -------------------------------------------------------------------------
def parse_event(data: object) -> RecordedEvent:
    """One line's object back into its event; ValueError (or TypeError) when it is not one."""
    if not isinstance(data, Mapping):
        raise ValueError("an event is a JSON object")
    read = _Reader(data)
    kind = read.text("event")
    if kind == "unit":
        return _unit(read)
    if kind == "process":
        return ProcessStarted(
            instance=read.text("instance"),
            node=read.optional_text("node"),
            pid=read.integer("pid"),
            log_offset=read.optional_integer("log_offset"),
            time=read.time(),
        )
    if kind == "exit":
        return ProcessExited(
            instance=read.text("instance"),
            node=read.optional_text("node"),
            pid=read.integer("pid"),
            exit=exit_from_json(data.get("exit")),
            time=read.time(),
        )
    if kind == "liveness":
        return LivenessFailed(
            instance=read.text("instance"),
            node=read.optional_text("node"),
            failures=read.integer("failures"),
            limit=read.integer("limit"),
            probe=read.text("probe"),
            time=read.time(),
        )
    if kind == "containment":
        known = {"time", "event", "node", "supervisor", "reason"}
        return Contained(
            node=read.optional_text("node"),
            supervisor=read.text("supervisor"),
            summary=read.text("reason"),
            details={k: v for k, v in data.items() if k not in known},
            time=read.time(),
        )
    if kind == "run":
        return _run_event(read)
    raise ValueError(f"unknown event {kind!r}")


def _unit(read: _Reader) -> UnitTransition:
    exit_json = read.data.get("exit")
    return UnitTransition(
        instance=read.text("instance"),
        node=read.optional_text("node"),
        from_state=InstanceState(read.data.get("from", InstanceState.INACTIVE.value)),
        to_state=InstanceState(read.data.get("to")),
        reason=read.optional_text("reason") or "",
        restarts=read.optional_integer("restarts") or 0,
        pid=read.optional_integer("pid"),
        exit=None if exit_json is None else exit_from_json(exit_json),
        readiness_timeout=read.data.get("readiness_timeout") is True,
        probe=read.optional_text("probe"),
        time=read.time(),
    )


_SIMPLE_RUN: dict[str, Callable[[_Reader], RunLifecycle]] = {
    "starting": lambda r: RunStarting(invocation_id=r.text("invocation_id"), time=r.time()),
    "ending": lambda r: RunEnding(outcome=Outcome.from_dict(r.data), time=r.time()),
    "stopping": lambda r: RunStopping(time=r.time()),
    KillingEverything.reason: lambda r: KillingEverything(time=r.time()),
    "sweep left survivors": lambda r: SweepLeftSurvivors(
        pids=tuple(int(p) for p in r.data.get("pids", ())), time=r.time()
    ),
    "finished": lambda r: RunFinished(outcome=Outcome.from_dict(r.data), time=r.time()),
}


def _run_event(read: _Reader) -> RunLifecycle:
    reason = read.text("reason")
    if reason.startswith("forwarding "):
        name = reason.removeprefix("forwarding ")
        return SignalForwarded(signum=int(signal.Signals[name]), time=read.time())
    if reason not in _SIMPLE_RUN:
        raise ValueError(f"unknown run event {reason!r}")
    return _SIMPLE_RUN[reason](read)


class _Reader:
    """Typed access to one event object's fields (ValueError naming the field)."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self.data: Mapping[str, Any] = data

    def time(self) -> float:
        value = self.data.get("time")
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise ValueError("an event needs a numeric time")
        return float(value)

    def text(self, key: str) -> str:
        value = self.data.get(key)
        if not isinstance(value, str):
            raise ValueError(f"{key!r} must be a string")
        return value

    def optional_text(self, key: str) -> str | None:
        return None if self.data.get(key) is None else self.text(key)

    def integer(self, key: str) -> int:
        value = self.data.get(key)
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"{key!r} must be an integer")
        return value

    def optional_integer(self, key: str) -> int | None:
        return None if self.data.get(key) is None else self.integer(key)
