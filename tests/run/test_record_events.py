"""``events.jsonl``: every kind of event is written in its documented shape and read back
into the same value; a reader skips what it cannot parse (a torn last line)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from ddsup._errors import ResultStatus
from ddsup.process import ExitStatus
from ddsup.record._event_log import EventLog, read_events
from ddsup.record._events import (
    KillingEverything,
    LivenessFailed,
    ProcessExited,
    ProcessStarted,
    RecordedEvent,
    RunEnding,
    RunFinished,
    RunStarting,
    RunStopping,
    SignalForwarded,
    SweepLeftSurvivors,
    UnitTransition,
    parse_event,
)
from ddsup.record._instance import InstanceRecord, fold
from ddsup.record._outcome import Outcome
from ddsup.record._states import InstanceState as S

OUTCOME = Outcome(ResultStatus.UNIT_FAILED, 70, "lane@0", "exit status 4", ExitStatus(code=4))
SAMPLES: list[tuple[RecordedEvent, dict[str, object]]] = [
    (
        UnitTransition(
            instance="lane@0",
            node="n1",
            from_state=S.READY,
            to_state=S.RESTARTING,
            reason="killed by SIGKILL; restart in 2s",
            restarts=3,
            exit=ExitStatus(signal=9),
            time=10.5,
        ),
        {
            "time": 10.5, "event": "unit", "instance": "lane@0", "node": "n1", "from": "ready",
            "to": "restarting", "reason": "killed by SIGKILL; restart in 2s", "restarts": 3,
            "exit": {"signal": "SIGKILL"},
        },
    ),
    (
        UnitTransition(
            instance="w", node=None, from_state=S.STARTING, to_state=S.FAILED, reason="r",
            pid=7, readiness_timeout=True, probe="HTTP 503", time=1.0,
        ),
        {
            "time": 1.0, "event": "unit", "instance": "w", "from": "starting", "to": "failed",
            "reason": "r", "restarts": 0, "pid": 7, "readiness_timeout": True, "probe": "HTTP 503",
        },
    ),
    (
        ProcessStarted(instance="w", node="n1", pid=7, log_offset=120, time=2.0),
        {"time": 2.0, "event": "process", "instance": "w", "node": "n1", "pid": 7, "log_offset": 120},
    ),
    (
        ProcessExited(instance="w", node="n1", pid=7, exit=ExitStatus(code=3), time=3.0),
        {
            "time": 3.0, "event": "exit", "instance": "w", "node": "n1", "pid": 7,
            "reason": "exit status 3", "exit": {"code": 3},
        },
    ),
    (
        LivenessFailed(instance="lane@1", node="n2", failures=2, limit=3, probe="HTTP 500", time=3.5),
        {
            "time": 3.5, "event": "liveness", "instance": "lane@1", "node": "n2", "failures": 2,
            "limit": 3, "probe": "HTTP 500",
            "reason": "liveness probe failed (2 of 3 in a row): HTTP 500",
        },
    ),
    (
        RunStarting(invocation_id="abc", time=4.0),
        {"time": 4.0, "event": "run", "reason": "starting", "invocation_id": "abc"},
    ),
    (
        RunEnding(outcome=OUTCOME, time=5.0),
        {
            "time": 5.0, "event": "run", "reason": "ending", "status": "unit_failed",
            "exit_code": 70,
            "cause": {"reason": "exit status 4", "unit": "lane@0", "exit": {"code": 4}},
        },
    ),
    (RunStopping(time=6.0), {"time": 6.0, "event": "run", "reason": "stopping"}),
    (
        SignalForwarded(signum=signal.SIGUSR1, time=7.0),
        {"time": 7.0, "event": "run", "reason": "forwarding SIGUSR1", "signal": "SIGUSR1"},
    ),
    (
        KillingEverything(time=8.0),
        {"time": 8.0, "event": "run", "reason": "second stop signal: killing everything"},
    ),
    (
        SweepLeftSurvivors(pids=(4, 5), time=9.0),
        {"time": 9.0, "event": "run", "reason": "sweep left survivors", "pids": [4, 5]},
    ),
    (
        RunFinished(outcome=OUTCOME, time=9.5),
        {
            "time": 9.5, "event": "run", "reason": "finished", "status": "unit_failed",
            "exit_code": 70,
            "cause": {"reason": "exit status 4", "unit": "lane@0", "exit": {"code": 4}},
        },
    ),
]  # fmt: skip


@pytest.mark.parametrize(("event", "line"), SAMPLES, ids=lambda v: type(v).__name__)
def test_every_event_has_its_documented_shape_and_reads_back(
    event: RecordedEvent, line: dict[str, object]
) -> None:
    assert event.to_json() == line
    assert parse_event(json.loads(json.dumps(line))) == event


def test_a_reader_skips_what_it_cannot_parse_including_a_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    log = EventLog(path)
    for event, _line in SAMPLES:
        log.write(event)
    log.close()
    with path.open("a") as handle:
        handle.write('{"event": "telepathy", "time": 1.0}\n')  # a kind this ddsup does not know
        handle.write('{"event": "unit", "time": 1.0}\n')  # no instance
        handle.write('{"time": 12.0, "event": "unit", "instance": "w", "fr')  # torn
    assert read_events(path) == [event for event, _line in SAMPLES]
    assert path.stat().st_mode & 0o777 == 0o600


def test_the_fold_is_what_status_shows() -> None:
    events: list[RecordedEvent] = [
        UnitTransition(instance="w", node="n", from_state=S.INACTIVE, to_state=S.STARTING,
                       reason="starting", time=1.0),
        ProcessStarted(instance="w", node="n", pid=41, time=1.1),
        UnitTransition(instance="w", node="n", from_state=S.STARTING, to_state=S.READY,
                       reason="probe passed", pid=41, probe="ok", time=3.5),
    ]  # fmt: skip
    record = fold(events)["w"]
    assert (record.state, record.pid, record.ready_seconds) == (S.READY, 41, 2.5)
    assert record.probe_verdict == "ok"
    assert fold(events[:2])["w"].probe_verdict == "pending" and fold(events[:2])["w"].pid == 41
    timed_out = InstanceRecord(state=S.RESTARTING, readiness_timeout=True, probe="HTTP 503")
    assert timed_out.probe_verdict == "timed out (HTTP 503)"
    assert InstanceRecord(state=S.READY).probe_verdict == "none"  # ready without a probe


def test_the_fold_shows_an_unresponsive_lane_and_forgets_its_failures_once_it_answers() -> None:
    def moved(frm: S, to: S, at: float) -> UnitTransition:
        return UnitTransition(
            instance="l", node="n", from_state=frm, to_state=to, reason="r", probe="x", time=at
        )

    def failed(n: int, at: float) -> LivenessFailed:
        return LivenessFailed(
            instance="l", node="n", failures=n, limit=3, probe="no answer within 5s", time=at
        )

    events: list[RecordedEvent] = [
        moved(S.STARTING, S.READY, 1.0), failed(1, 2.0), moved(S.READY, S.UNRESPONSIVE, 2.0),
        failed(2, 3.0),
    ]  # fmt: skip
    record = fold(events)["l"]
    assert (record.state, record.liveness_failures) == (S.UNRESPONSIVE, 2)
    assert record.probe_verdict == "failing 2/3 (no answer within 5s)"
    back = fold([*events, moved(S.UNRESPONSIVE, S.READY, 4.0)])["l"]
    assert (back.state, back.liveness_failures) == (S.READY, 0)
