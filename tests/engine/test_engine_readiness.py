"""Readiness probes gate what starts next; a unit never ready within timeout_start ends
the run with 75 (``readiness_timeout``)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
import trio

from ddsup.record._events import RecordedEvent, UnitTransition
from ddsup.record._states import InstanceState
from ddsup.service._service import Service, ServiceSpec
from ddsup.units._model import (
    ProbeKind,
    ReadySection,
    ServiceSection,
    SourceLocation,
    Unit,
    UnitType,
)
from support.runs import PY, run_start
from support.unit_dirs import UnitDir

# Listens on PORT only after DELAY seconds (connections are refused until then).
LATE_LISTENER_PY = """\
import socket, sys, time
port, delay = int(sys.argv[1]), float(sys.argv[2])
time.sleep(delay)
server = socket.create_server(("127.0.0.1", port))
while True:
    server.accept()[0].close()
"""

# The worker: at its start, every lane of plan.json answers (HTTP 200 / TCP accept) and
# the exec-probed service's marker exists; exit 0 only then.
CHECK_PY = """\
import json, os, socket, sys, urllib.request
state = os.environ["DDSUP_STATE_DIR"]
plan = json.load(open(os.path.join(state, "plan.json")))
ports = dict((i["instance"], i["port"]) for i in plan["instances"] if i["type"] == "lane")
with urllib.request.urlopen("http://127.0.0.1:%d/health" % ports["http@0"], timeout=5) as r:
    assert r.status == 200, r.status
socket.create_connection(("127.0.0.1", ports["tcp@0"]), timeout=5).close()
assert os.path.exists(os.path.join(state, "marker")), "exec-probed unit not ready"
"""


def _lane(model: str) -> dict[str, object]:
    return {"model": model, "gpus": 1, "replicas": 1, "port": "auto", "stagger": "0s"}


@pytest.mark.slow  # node agents: a few seconds each
async def test_http_tcp_and_exec_probes_gate_the_worker(tmp_path: Path) -> None:
    units = UnitDir(tmp_path / "units")
    (units.path / "late.py").write_text(LATE_LISTENER_PY)
    (units.path / "check.py").write_text(CHECK_PY)
    fast = {"interval": "50ms"}
    units.add(
        "http@",
        "lane",
        [PY, "-m", "ddsup", "fake-vllm", "--port", "{port}", "--startup-delay", "0.5"],
        ready={"http": "http://{host}:{port}/health", **fast},
        lane=_lane("a"),
    )
    units.add(
        "tcp@",
        "lane",
        [PY, units.script("late.py"), "{port}", "0.4"],
        ready={"tcp": "{host}:{port}", **fast},
        lane=_lane("b"),
    )
    units.add(
        "marked",
        "service",
        ["sh", "-c", "sleep 0.3; touch {state_dir}/marker; exec sleep 60"],
        ready={"exec": ["test", "-e", "{state_dir}/marker"], **fast},
    )
    units.add(
        "worker",
        "worker",
        [PY, units.script("check.py")],
        unit={"after": ["http", "tcp", "marked"]},
    )
    run = await run_start(units, tmp_path / "state", "--gpus-per-node", "2")

    assert run.returncode == 0, run.describe() + (run.state / "logs/worker.log").read_text()
    worker_start = run.times("worker", "starting")[0]
    for instance, delay in (("http@0", 0.5), ("tcp@0", 0.4), ("marked", 0.3)):
        [starting] = run.times(instance, "starting")
        [ready] = run.times(instance, "ready")
        assert ready - starting >= delay, f"{instance} ready before it could serve"
        assert ready <= worker_start
    [probed] = run.transitions("http@0", "ready")
    assert probed["reason"] == "probe passed"


@pytest.mark.parametrize(("restart", "starts"), [("no", 1), ("always", 3)])
async def test_never_ready_within_timeout_start_exits_75(
    tmp_path: Path, restart: str, starts: int
) -> None:
    """A readiness timeout counts as a failure for the restart policy; when it is what
    finally fails the unit (no restart, or the start limit), the run exits 75."""
    units = UnitDir(tmp_path / "units")
    units.add(
        "stuck",
        "service",
        ["sleep", "60"],
        service={
            "timeout_start": "300ms",
            "restart": restart,
            "restart_sec": "0s",
            "start_limit_burst": 3,
            "start_limit_interval": "1h",
        },
        ready={"exec": ["false"], "interval": "50ms"},
    )
    units.add("worker", "worker", ["true"], unit={"after": ["stuck"]})
    run = await run_start(units, tmp_path / "state")

    assert run.returncode == 75, run.describe()
    result = run.result()
    assert result["status"] == "readiness_timeout"
    assert result["exit_code"] == 75
    assert result["cause"]["unit"] == "stuck"
    assert "timeout_start" in result["cause"]["reason"]
    starting = run.times("stuck", "starting")
    assert len(starting) == starts
    [failed] = run.times("stuck", "failed")
    assert failed - starting[-1] >= 0.3
    assert not run.transitions("worker", "starting")


async def test_tcp_probe_waits_for_a_listening_socket(tmp_path: Path) -> None:
    """In-process: a port that is bound but not listening refuses; ready once it listens."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        port = server.getsockname()[1]
        unit = Unit(
            name="svc",
            type=UnitType.SERVICE,
            service=ServiceSection(exec=("sleep", "60"), timeout_stop=5.0),
            source=SourceLocation("svc.toml"),
            ready=ReadySection(ProbeKind.TCP, f"127.0.0.1:{port}", interval=0.05),
        )
        spec = ServiceSpec(
            "svc",
            "node0",
            unit,
            unit.service.exec,
            dict(os.environ),
            str(tmp_path),
            tmp_path / "svc.log",
            {},
        )
        events: list[RecordedEvent] = []
        service = Service(spec, events.append)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(service.run)
            await trio.sleep(0.3)  # an observation window for a negative, not synchronisation
            assert service.status.state is InstanceState.STARTING
            server.listen()
            with trio.fail_after(5):
                await service.ready.wait()
            assert service.status.probe == "ok"
            service.request_stop()
        assert [e.to_state.value for e in events if isinstance(e, UnitTransition)] == [
            "starting",
            "ready",
            "stopping",
            "exited",
        ]
