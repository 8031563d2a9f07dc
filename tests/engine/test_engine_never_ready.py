"""A unit that is never ready ends the run 75 after ``start_limit_burst`` attempts.

Readiness failures count against ``start_limit_burst`` in a row, with no window: however
long ``timeout_start`` is next to ``start_limit_interval``, the attempts run out. (Before,
a fixed ``timeout_start`` longer than ``start_limit_interval / start_limit_burst`` never
fitted the starts into the window, and a lane restarted forever.) ``status`` shows which
attempt a start is and what the probe last answered, from structured fields.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import trio
import trio.testing

from ddsup.record._events import ProbeAnswered, RecordedEvent, UnitTransition
from ddsup.record._states import InstanceState
from ddsup.service._service import Service, ServiceSpec
from ddsup.units._model import (
    ProbeKind,
    ReadySection,
    Restart,
    ServiceSection,
    SourceLocation,
    Unit,
    UnitType,
)
from support.runs import PY, running, start_env
from support.unit_dirs import UnitDir


def test_an_hour_long_timeout_start_still_ends_after_the_burst(tmp_path: Path) -> None:
    """Default limits (5 starts within 10s) and timeout_start = 1h: five attempts, then
    failed with the readiness timeout's verdict; the reasons speak in human units.

    Five hours pass on a mock clock that jumps only after 100 ms of real idleness, so a
    real process start or a refused connection is never mistaken for a wait."""
    events: list[RecordedEvent] = []
    clock = trio.testing.MockClock(autojump_threshold=0.1)
    trio.run(_stuck_service, tmp_path, events, clock=clock)
    _check_stuck(events)


async def _stuck_service(tmp_path: Path, events: list[RecordedEvent]) -> None:
    unit = Unit(
        name="stuck",
        type=UnitType.SERVICE,
        service=ServiceSection(
            exec=("sleep", "86400"), restart=Restart.ON_FAILURE, timeout_start=3600.0
        ),
        source=SourceLocation("stuck.toml"),
        ready=ReadySection(ProbeKind.TCP, "127.0.0.1:1", interval=600.0),  # never listens
    )
    spec = ServiceSpec(
        "stuck", "node0", unit, unit.service.exec, {"PATH": "/usr/bin:/bin"}, str(tmp_path),
        tmp_path / "stuck.log", {},
    )  # fmt: skip
    await Service(spec, events.append).run()


def _check_stuck(events: list[RecordedEvent]) -> None:
    moves = [e for e in events if isinstance(e, UnitTransition)]
    starts = [e for e in moves if e.to_state is InstanceState.STARTING]
    assert [(e.attempt, e.attempt_limit) for e in starts] == [(k, 5) for k in range(1, 6)]
    failed = moves[-1]
    assert failed.to_state is InstanceState.FAILED and failed.readiness_timeout
    assert failed.reason.startswith(
        "start limit hit: not ready after 5 attempts in a row (start_limit_burst = 5); "
        "last: not ready within timeout_start = 1h (last probe: "
    )
    restarting = [e.reason for e in moves if e.to_state is InstanceState.RESTARTING]
    assert len(restarting) == 4  # the fifth failed attempt fails it at once
    assert re.fullmatch(
        r"not ready within timeout_start = 1h \(.*\); restart in \d+ms", restarting[0]
    )
    answers = [e.answer for e in events if isinstance(e, ProbeAnswered)]
    # one per start (a repeated answer is not told again), in the system's words
    assert answers == ["Connection refused"] * 5, answers


@pytest.mark.slow
async def test_a_lane_never_ready_under_default_limits_exits_75(tmp_path: Path) -> None:
    """The issue's lane: --fail-health, timeout_start longer than 10s / 5, restart =
    "on-failure", every limit at its default. Live status shows the attempt and the
    probe's answer; the run ends 75 after five attempts."""
    units = UnitDir(tmp_path / "units")
    units.add(
        "lane@",
        "lane",
        [PY, "-m", "ddsup", "fake-vllm", "--port", "{port}", "--fail-health"],
        service={"restart": "on-failure", "timeout_start": "2500ms", "timeout_stop": "5s"},
        ready={"http": "http://{host}:{port}/health", "interval": "100ms"},
        lane={"model": "m", "gpus": 1, "replicas": 1, "port": "auto"},
    )
    units.add("worker", "worker", ["true"], unit={"after": ["lane"]})
    state = tmp_path / "state"
    async with running(units, state, "--gpus-per-node", "1") as run:

        def second_attempt_answered(events: list[dict[str, object]]) -> bool:
            lane = [e for e in events if e.get("instance") == "lane@0"]
            starts = [i for i, e in enumerate(lane) if e.get("to") == "starting"]
            if len(starts) < 2:
                return False
            return "HTTP 503" in [e.get("answer") for e in lane[starts[1] :]]

        await run.wait_for(second_attempt_answered, limit=20)
        shown = _status(state)
        await run.wait(limit=40)

    assert run.run.returncode == 75, run.run.describe()
    lane = next(i for i in shown["instances"] if i["instance"] == "lane@0")
    assert (lane["attempt"], lane["attempt_limit"]) == (2, 5), lane
    assert lane["probe"] == "HTTP 503", lane
    result = run.run.result()
    assert (result["status"], result["cause"]["unit"]) == ("readiness_timeout", "lane@0")
    assert "not ready after 5 attempts in a row" in result["cause"]["reason"]
    assert len(run.run.transitions("lane@0", "starting")) == 5
    finished = _status(state)
    lane = next(i for i in finished["instances"] if i["instance"] == "lane@0")
    assert (lane["state"], lane["attempt"], lane["probe"]) == ("failed", 5, "timed out (HTTP 503)")


def _status(state: Path) -> dict[str, object]:
    done = subprocess.run(
        [PY, "-m", "ddsup", "status", "--json", "--state-dir", str(state)],
        capture_output=True,
        text=True,
        env=start_env(),
        timeout=30,
        check=True,
    )
    data: dict[str, object] = json.loads(done.stdout)
    return data
