"""The events a node emits: its instances' transitions, processes and probes, and the
containment its supervisor holds there.

Apart from the run's own lifecycle (``_events``: ``ddsup start``'s alone, which
re-exports these) because a node agent emits only these, and every frozen dataclass
costs its start-up the compiling of each generated method: an agent creates these six,
not the fourteen of every kind. The shapes are
``_events``' docstring's and docs/operating.md's.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ddsup._exit import ExitStatus
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
        for key in ("attempt", "attempt_limit", "master_port"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.until is not None:
            out["until"] = round(self.until, 3)
        return out


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

    def to_json(self) -> dict[str, Any]:
        return {**_head(self.time, "probe", self.instance, self.node), "answer": self.answer}


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


def _head(at: float, kind: str, instance: str, node: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {"time": round(at, 6), "event": kind, "instance": instance}
    if node is not None:
        out["node"] = node
    return out
