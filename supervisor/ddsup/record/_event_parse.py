"""Reading ``events.jsonl`` lines back into their events (``_events``).

:func:`parse_event` turns one line's object back into its typed event and raises
ValueError (or TypeError) for anything else; ``_fields`` reads each field as the type it
must have, so a torn or foreign line is one the reader of the file skips.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Mapping

from ddsup.record._events import (
    Contained,
    KillingEverything,
    LivenessFailed,
    PreflightWarning,
    ProbeAnswered,
    ProcessExited,
    ProcessStarted,
    RecordedEvent,
    RunEnding,
    RunFinished,
    RunLifecycle,
    RunStarting,
    RunStopping,
    SignalForwarded,
    SweepLeftSurvivors,
    UnitTransition,
)
from ddsup.record._fields import FieldReader
from ddsup.record._outcome import Outcome, exit_from_json
from ddsup.record._states import InstanceState


def parse_event(data: object) -> RecordedEvent:
    """One line's object back into its event; ValueError (or TypeError) when it is not one."""
    if not isinstance(data, Mapping):
        raise ValueError("an event is a JSON object")
    read = FieldReader(data)
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
    if kind == "probe":
        return ProbeAnswered(
            instance=read.text("instance"),
            node=read.optional_text("node"),
            answer=read.text("answer"),
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


def _unit(read: FieldReader) -> UnitTransition:
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
        attempt=read.optional_integer("attempt"),
        attempt_limit=read.optional_integer("attempt_limit"),
        master_port=read.optional_integer("master_port"),
        until=read.optional_number("until"),
        time=read.time(),
    )


_SIMPLE_RUN: dict[str, Callable[[FieldReader], RunLifecycle]] = {
    "starting": lambda r: RunStarting(invocation_id=r.text("invocation_id"), time=r.time()),
    PreflightWarning.reason: lambda r: PreflightWarning(
        node=r.text("node"), warning=r.text("warning"), time=r.time()
    ),
    "ending": lambda r: RunEnding(outcome=Outcome.from_dict(r.data), time=r.time()),
    "stopping": lambda r: RunStopping(time=r.time()),
    KillingEverything.reason: lambda r: KillingEverything(time=r.time()),
    "sweep left survivors": lambda r: SweepLeftSurvivors(pids=r.integers("pids"), time=r.time()),
    "finished": lambda r: RunFinished(outcome=Outcome.from_dict(r.data), time=r.time()),
}


def _run_event(read: FieldReader) -> RunLifecycle:
    reason = read.text("reason")
    if reason.startswith("forwarding "):
        name = reason.removeprefix("forwarding ")
        return SignalForwarded(signum=int(signal.Signals[name]), time=read.time())
    if reason not in _SIMPLE_RUN:
        raise ValueError(f"unknown run event {reason!r}")
    return _SIMPLE_RUN[reason](read)
