"""The state machine of one :class:`ddsup.service._service.Service`, driven in-process with real
processes: the transitions a user sees in ``events.jsonl`` and ``ddsup status``."""

from __future__ import annotations

import os
from pathlib import Path

import trio
import trio.testing

from ddsup.process import ExitStatus
from ddsup.process._managed import managed_children
from ddsup.record._events import ProcessExited, ProcessStarted, RecordedEvent, UnitTransition
from ddsup.record._states import InstanceState
from ddsup.service._service import Service, ServiceSpec
from ddsup.units._model import Restart, ServiceSection, SourceLocation, Unit, UnitType


def _service(
    tmp_path: Path, argv: tuple[str, ...], events: list[RecordedEvent], **keys: object
) -> Service:
    unit = Unit(
        name="svc",
        type=UnitType.SERVICE,
        service=ServiceSection(exec=argv, **keys),  # type: ignore[arg-type]
        source=SourceLocation("svc.toml"),
    )
    spec = ServiceSpec(
        instance="svc",
        node="node0",
        unit=unit,
        argv=argv,
        env=dict(os.environ),
        cwd=str(tmp_path),
        log_path=tmp_path / "svc.log",
        context={},
    )
    return Service(spec, events.append)


def _states(events: list[RecordedEvent]) -> list[str]:
    return [e.to_state.value for e in events if isinstance(e, UnitTransition)]


def _kinds(events: list[RecordedEvent]) -> list[str]:
    """Transitions by the state they go to, other events by their kind."""
    names = {ProcessStarted: "process", ProcessExited: "exit"}
    return [e.to_state.value if isinstance(e, UnitTransition) else names[type(e)] for e in events]


async def test_clean_exit_with_on_failure_is_not_restarted(tmp_path: Path) -> None:
    events: list[RecordedEvent] = []
    service = _service(tmp_path, ("true",), events, restart=Restart.ON_FAILURE)
    await service.run()
    assert _states(events) == ["starting", "ready", "exited"]
    assert service.status.last_exit == ExitStatus(code=0)


async def test_stop_while_starting_never_reports_ready(tmp_path: Path) -> None:
    """A stop that lands between spawn and the first checkpoint of a probe-less unit (the
    controller stopping everything as the unit starts) must not make it "ready"."""
    events: list[RecordedEvent] = []
    service = _service(tmp_path, ("sleep", "60"), events, timeout_stop=5.0)

    def emit(event: RecordedEvent) -> None:
        events.append(event)
        if isinstance(event, ProcessStarted):  # spawned, readiness not yet reported
            service.request_stop("stop while starting")

    service._emit = emit
    with trio.fail_after(10):
        await service.run()
    assert _states(events) == ["starting", "stopping", "exited"]
    assert not service.ready.is_set()
    assert service.status.state is InstanceState.EXITED


async def test_request_stop_is_idempotent_and_reaps(tmp_path: Path) -> None:
    events: list[RecordedEvent] = []
    service = _service(tmp_path, ("sleep", "60"), events, timeout_stop=5.0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(service.run)
        with trio.fail_after(10):
            await service.ready.wait()
        pid = service.status.pid
        assert pid is not None
        service.request_stop()
        service.request_stop()
        with trio.fail_after(10):
            await service.finished.wait()
    assert _states(events) == ["starting", "ready", "stopping", "exited"]
    assert service.status.last_exit == ExitStatus(signal=15)
    assert service.status.pid is None


def _wait_until_exited(pid: int) -> None:
    """Block until ``pid`` has exited, without reaping it (``WNOWAIT``)."""
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)


async def test_an_exit_is_recorded_as_seen_before_the_cleanup_and_the_verdict(
    tmp_path: Path,
) -> None:
    """A unit without a probe is ready once started, before its exit, every time.

    The race this pins: the process has already exited when the service first waits for
    it, so the exit watcher and the readiness report become runnable in the same
    scheduler batch, whose order trio randomises. The process event's handler waits for
    the exit (without reaping), which makes that the case on every round; before the fix
    about half the rounds recorded ``exit`` before ``ready``.
    """
    for _round in range(24):
        events: list[RecordedEvent] = []
        service = _service(tmp_path, ("sh", "-c", "exit 3"), events, restart=Restart.NO)

        def emit(event: RecordedEvent, events: list[RecordedEvent] = events) -> None:
            events.append(event)
            if isinstance(event, ProcessStarted):
                _wait_until_exited(event.pid)

        service._emit = emit
        await service.run()
        assert _kinds(events) == ["starting", "process", "ready", "exit", "failed"]
        started, exit_event, failed = events[1], events[3], events[4]
        assert isinstance(exit_event, ProcessExited) and isinstance(started, ProcessStarted)
        assert (exit_event.pid, exit_event.exit) == (started.pid, ExitStatus(code=3))
        assert exit_event.to_json()["reason"] == "exit status 3"
        assert exit_event.time <= failed.time


async def test_a_stopped_process_has_no_exit_event(tmp_path: Path) -> None:
    events: list[RecordedEvent] = []
    service = _service(tmp_path, ("sleep", "60"), events, timeout_stop=5.0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(service.run)
        await service.ready.wait()
        service.request_stop()
    assert _states(events) == ["starting", "ready", "stopping", "exited"]
    assert [e for e in events if isinstance(e, ProcessExited)] == []


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


async def test_a_start_cancelled_before_its_spawn_leaves_no_pipe_open(tmp_path: Path) -> None:
    """A stop that cancels a start while it waits to fork (the registry's lock is held by
    another start or the reaper) closes both ends of the output pipe it made: a leaked
    read end per cancelled start would exhaust the descriptors of a long run."""
    events: list[RecordedEvent] = []
    service = _service(tmp_path, ("sleep", "60"), events, timeout_stop=5.0)
    before = _open_fds()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery, managed_children().lock:  # fork waits
            nursery.start_soon(service.run)
            await trio.testing.wait_all_tasks_blocked()
            assert not [e for e in events if isinstance(e, ProcessStarted)]
            nursery.cancel_scope.cancel()
    assert _open_fds() - before == set()
