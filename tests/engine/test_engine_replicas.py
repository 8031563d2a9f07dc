"""A lane that spans two (simulated) nodes lives and dies as one replica.

Real runs with ``--nodes 2``: rank 0 on node0 serves HTTP, rank 1 on node1 does not. Each
rank appends ``INSTANCE MASTER_PORT PID`` to ``starts`` in the state directory when it
starts, and exits with its code when the test drops ``end-INSTANCE`` there. The tests
check the issue's cases: a follower crash, a rank 0 crash and a follower's exit 0 each
restart the whole replica (rank 0 first, the follower on its port), counted once; the
run never goes on with half a replica; past the start limit it fails as one.

A stamp is written by the rank's own script, after its interpreter has started: a rank
the run takes down early (its peer crashed at once) may never write one. The starts the
run made are its ``process`` events; a test that reads stamps first waits for the ones
it needs (a file: bounded poll).
"""

from __future__ import annotations

import json
import signal
import socket
from pathlib import Path
from typing import Any

import pytest

from support.polls import until
from support.runs import PY, Running, running
from support.unit_dirs import UnitDir

pytestmark = pytest.mark.slow  # node agents: a few seconds each

RANK_PY = """\
import http.server, os, sys, threading, time
state = os.environ["DDSUP_STATE_DIR"]
instance = os.environ["DDSUP_INSTANCE"]
port, master_port, code, when = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
with open(os.path.join(state, "starts"), "a") as out:
    out.write(f"{instance} {master_port} {os.getpid()}\\n")
if when == "now":
    sys.exit(code)


class Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


if os.environ["DDSUP_LANE_RANK"] == "0" and when != "never-ready":
    server = http.server.ThreadingHTTPServer(("127.0.0.1", int(port)), Ok)
    threading.Thread(target=server.serve_forever, daemon=True).start()
trigger = os.path.join(state, f"end-{instance}")
while not os.path.exists(trigger):  # the test's cue: a file (no event to wait on)
    time.sleep(0.02)
os.rename(trigger, f"{trigger}.{os.getpid()}")  # once: the next start waits again
sys.exit(code)
"""
HELD = "the replica restarts as one"


def _units(
    tmp_path: Path,
    code: int = 1,
    *,
    follower: str = "on-cue",
    head: str = "on-cue",
    **service: Any,
) -> UnitDir:
    units = UnitDir(tmp_path / "units")
    (units.path / "rank.py").write_text(RANK_PY)
    argv = [PY, units.script("rank.py"), "{port}", "{master_port}", str(code)]
    units.add(
        "lane@",
        "lane",
        [*argv, head],
        service={
            "exec_follower": [*argv, follower],
            "restart": "on-failure",
            "restart_sec": "100ms",
            "timeout_stop": "5s",
            **service,
        },
        ready={"http": "http://{host}:{port}/health", "interval": "50ms"},
        lane={"model": "m", "gpus": 1, "nodes": 2, "replicas": 1, "port": "auto"},
    )
    return units


def _starts(state: Path) -> list[tuple[str, int]]:
    lines = (state / "starts").read_text().split("\n")
    return [(name, int(port)) for name, port, _pid in (line.split() for line in lines if line)]


def _planned_master_port(state: Path) -> int:
    plan = json.loads((state / "plan.json").read_text())
    return int(next(i["master_port"] for i in plan["instances"] if i["instance"] == "lane@0"))


def _last(events: list[dict[str, Any]], to: str) -> dict[str, Any]:
    return [e for e in events if e["to"] == to][-1]


def _ready_twice(events: list[dict[str, Any]]) -> bool:
    ready = [e for e in events if e.get("instance") == "lane@0" and e.get("to") == "ready"]
    follower = [e for e in events if e.get("instance") == "lane@0:1" and e.get("to") == "ready"]
    return len(ready) >= 2 and len(follower) >= 2


def _spawned(events: list[dict[str, Any]], instance: str) -> list[int]:
    """The pids of ``instance``'s processes, as the run started them."""
    return [e["pid"] for e in events if e["event"] == "process" and e["instance"] == instance]


async def _restart_on_cue(run: Running, state: Path, who: str) -> list[dict[str, Any]]:
    await run.wait_ready("lane@0", "lane@0:1", limit=30)
    await _stamped(state, 2)  # else the cue may take the follower down before its stamp
    (state / f"end-{who}").touch()
    events = await run.wait_for(_ready_twice, limit=30)
    await _stamped(state, 4)
    return events


async def _stamped(state: Path, count: int) -> None:
    """Until ``count`` start stamps are written. A rank > 0 has no probe: its ``ready``
    can come before its own stamp (a file: bounded poll)."""
    await until(lambda: len(_starts(state)) >= count, f"{count} start stamps", limit=10)


@pytest.mark.parametrize(
    ("who", "code"),
    [("lane@0:1", 1), ("lane@0", 1), ("lane@0:1", 0)],
    ids=["follower-crash", "rank-0-crash", "follower-exit-0"],
)
async def test_any_rank_ending_restarts_the_whole_replica(
    tmp_path: Path, who: str, code: int
) -> None:
    state = tmp_path / "state"
    async with running(
        _units(tmp_path, code), state, "--nodes", "2", "--gpus-per-node", "1"
    ) as run:
        events = await _restart_on_cue(run, state, who)
    peer = "lane@0" if who == "lane@0:1" else "lane@0:1"

    def moves(instance: str) -> list[dict[str, Any]]:
        return [e for e in events if e["event"] == "unit" and e["instance"] == instance]

    went = next(e for e in moves(who) if e["to"] == "restarting")
    assert went["reason"] == f"exit status {code}; {HELD}"
    taken = next(e for e in moves(peer) if e["to"] == "restarting")
    assert taken["reason"] == f"{who} went down (exit status {code}); {HELD}"
    for instance in ("lane@0", "lane@0:1"):  # every rank restarted once, together
        assert [e["to"] for e in moves(instance)][-4:] == [
            "ready",
            "restarting",
            "starting",
            "ready",
        ]
        assert moves(instance)[-1]["restarts"] == 1
    planned = _planned_master_port(state)
    # the fresh start: both ranks on the port rank 0 reported, the follower once it had
    assert sorted(_starts(state)[2:]) == [("lane@0", planned), ("lane@0:1", planned)]
    head, follower = (_last(moves(i), "starting") for i in ("lane@0", "lane@0:1"))
    assert head["master_port"] == follower["master_port"] == planned
    assert head["time"] <= follower["time"]
    assert run.process.returncode == 128 + signal.SIGTERM  # stopped by the test, cleanly


async def test_a_taken_master_port_gives_the_replica_a_fresh_one(tmp_path: Path) -> None:
    state = tmp_path / "state"
    async with running(_units(tmp_path), state, "--nodes", "2", "--gpus-per-node", "1") as run:
        await run.wait_ready("lane@0", "lane@0:1", limit=30)
        planned = _planned_master_port(state)
        with socket.socket() as squatter:  # another program took the port meanwhile
            squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            squatter.bind(("0.0.0.0", planned))
            squatter.listen()
            (state / "end-lane@0:1").touch()
            events = await run.wait_for(_ready_twice, limit=30)
            await _stamped(state, 4)

    fresh = {name: port for name, port in _starts(state)[2:]}
    assert fresh["lane@0"] == fresh["lane@0:1"] != planned
    second = [e for e in events if e.get("instance") == "lane@0" and e.get("to") == "starting"]
    assert second[-1]["master_port"] == fresh["lane@0"]


async def test_restart_no_never_leaves_half_a_replica(tmp_path: Path) -> None:
    """restart = "no": the follower's exit 0 fails it, rank 0 is stopped, the run ends 70
    (before, rank 0 went on serving alone and the run could end ok)."""
    state = tmp_path / "state"
    units = _units(tmp_path, 0, restart="no")
    async with running(units, state, "--nodes", "2", "--gpus-per-node", "1") as run:
        await run.wait_ready("lane@0", "lane@0:1", limit=30)
        (state / "end-lane@0:1").touch()
        await run.wait(limit=30)

    assert run.run.returncode == 70, run.run.describe()
    result = run.run.result()
    assert (result["status"], result["cause"]["unit"]) == ("unit_failed", "lane@0:1")
    assert result["cause"]["exit"] == {"code": 0}
    head = [e for e in run.run.transitions("lane@0")]
    assert [e["to"] for e in head][-2:] == ["stopping", "exited"]


@pytest.mark.parametrize(
    ("follower", "head", "status", "exit_code"),
    [("now", "on-cue", "unit_failed", 70), ("on-cue", "never-ready", "readiness_timeout", 75)],
    ids=["follower-crash-loop", "rank-0-never-ready"],
)
async def test_past_the_start_limit_the_replica_fails_as_one(
    tmp_path: Path, follower: str, head: str, status: str, exit_code: int
) -> None:
    """start_limit_burst = 2: the first start and one restart, counted per replica."""
    state = tmp_path / "state"
    units = _units(
        tmp_path,
        follower=follower,
        head=head,
        start_limit_burst=2,
        start_limit_interval="1h",
        timeout_start="1s",
    )
    async with running(units, state, "--nodes", "2", "--gpus-per-node", "1") as run:
        await run.wait(limit=40)

    assert run.run.returncode == exit_code, run.run.describe()
    result = run.run.result()
    assert (result["status"], result["cause"]["unit"]) == (status, "lane@0")
    assert result["cause"]["reason"].startswith("start limit hit: ")
    # one restart: rank 0's process started twice (the follower may crash before rank 0
    # has written its stamp, so the run's own process events count, not the stamps)
    spawned = _spawned(run.run.events(), "lane@0")
    assert len(spawned) == 2, spawned
    for instance in ("lane@0", "lane@0:1"):
        assert run.run.transitions(instance)[-1]["to"] == "failed"
