"""How a lane's process ends, driven in-process with real processes: a lane's own exit is
a failure whatever its status (vLLM's API server exits 0 once its engine has died), and
a lane that is not ready yet is stopped within ``timeout_stop_loading``, not
``timeout_stop`` (vLLM's API server ignores SIGTERM while it loads). The same against
real vLLM: ``tests/vllm``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import trio

from ddsup.record._events import RecordedEvent, UnitTransition
from ddsup.service._service import Service, ServiceSpec
from ddsup.units._model import (
    LaneSection,
    ProbeKind,
    ReadySection,
    Restart,
    ServiceSection,
    SourceLocation,
    Unit,
    UnitType,
)
from support.polls import until

# Ignores SIGTERM, then says so by creating the file it is given, then sleeps.
TERM_IGNORER = (
    "import pathlib, signal, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "pathlib.Path(sys.argv[1]).touch()\n"
    "time.sleep(120)\n"
)


def _lane(
    tmp_path: Path,
    argv: tuple[str, ...],
    events: list[RecordedEvent],
    *,
    ready: tuple[str, ...] | None = None,
    kind: UnitType = UnitType.LANE,
    **keys: object,
) -> Service:
    """A lane instance (``kind``: another type, for contrast) running ``argv``; ready when
    the exec probe ``ready`` passes, or once started without one."""
    probe = None if ready is None else ReadySection(ProbeKind.EXEC, ready, interval=0.05)
    unit = Unit(
        name="lane@",
        type=kind,
        service=ServiceSection(exec=argv, **keys),  # type: ignore[arg-type]
        source=SourceLocation("lane@.toml"),
        template=True,
        ready=probe,
        lane=LaneSection(model="m") if kind is UnitType.LANE else None,
    )
    spec = ServiceSpec(
        instance="lane@0",
        node="node0",
        unit=unit,
        argv=argv,
        env=dict(os.environ),
        cwd=str(tmp_path),
        log_path=tmp_path / "lane.log",
        context={},
    )
    return Service(spec, events.append)


def _transitions(events: list[RecordedEvent]) -> list[UnitTransition]:
    return [e for e in events if isinstance(e, UnitTransition)]


async def test_a_lane_that_exits_0_by_itself_is_restarted_under_on_failure(
    tmp_path: Path,
) -> None:
    events: list[RecordedEvent] = []
    service = _lane(
        tmp_path,
        ("true",),
        events,
        restart=Restart.ON_FAILURE,
        restart_sec=0.0,
        start_limit_burst=2,
    )
    with trio.fail_after(20):
        await service.run()
    moves = _transitions(events)
    states = [t.to_state.value for t in moves]
    assert states[:4] == ["starting", "ready", "restarting", "starting"], states
    assert states[-1] == "failed"  # past start_limit_burst, as any failing unit
    assert "a lane's own exit is a failure" in moves[2].reason
    assert moves[2].reason.startswith("exit status 0")


async def test_a_lane_that_exits_0_with_restart_no_has_failed(tmp_path: Path) -> None:
    events: list[RecordedEvent] = []
    await _lane(tmp_path, ("true",), events, restart=Restart.NO).run()
    assert [t.to_state.value for t in _transitions(events)] == ["starting", "ready", "failed"]


async def test_a_service_that_exits_0_has_exited(tmp_path: Path) -> None:
    """The contrast: for any other type an exit in success_exit_status is clean."""
    events: list[RecordedEvent] = []
    service = _lane(tmp_path, ("true",), events, kind=UnitType.SERVICE, restart=Restart.ON_FAILURE)
    await service.run()
    assert [t.to_state.value for t in _transitions(events)] == ["starting", "ready", "exited"]


async def _stop_once_ignoring(service: Service, marker: Path, *, ready: bool) -> float:
    """Start ``service`` (its process ignores SIGTERM once ``marker`` exists), stop it
    (once ``ready``, if it is to be), and return how long the stop took."""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(service.run)
        await until(marker.exists, "the process to ignore SIGTERM", limit=20.0)
        if ready:
            with trio.fail_after(20):
                await service.ready.wait()
        began = trio.current_time()
        service.request_stop()
        with trio.fail_after(20):
            await service.finished.wait()
        return trio.current_time() - began


@pytest.mark.parametrize("kill", ["loading", "ready"])
async def test_a_loading_lane_is_stopped_within_timeout_stop_loading(
    tmp_path: Path, kill: str
) -> None:
    """A lane whose probe never passed gets ``timeout_stop_loading`` (0.3 s here) to end
    after SIGTERM; once ready, it gets ``timeout_stop`` (3 s) to drain."""
    marker = tmp_path / "ignoring"
    events: list[RecordedEvent] = []
    argv = (sys.executable, "-c", TERM_IGNORER, str(marker))
    ready = ("test", "-e", str(marker)) if kill == "ready" else ("false",)
    service = _lane(tmp_path, argv, events, ready=ready, timeout_stop=3.0, timeout_stop_loading=0.3)
    took = await _stop_once_ignoring(service, marker, ready=kill == "ready")
    if kill == "ready":
        assert 3.0 <= took < 8.0, took
    else:
        assert took < 2.0, took
    states = [t.to_state.value for t in _transitions(events)]
    assert states[-2:] == ["stopping", "exited"], states
    assert ("ready" in states) is (kill == "ready")
