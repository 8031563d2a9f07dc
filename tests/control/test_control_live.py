"""``ddsup status``, ``stop`` and ``logs`` against live runs on two simulated nodes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

from control_helpers import LANES, PY, SECRET, ddsup, env, events, live_run, on_pty, wait_for

from support.runs import simulated, start_argv

ANSI = re.compile(rb"\x1b\[")

INSTANCE_KEYS = {
    "instance", "unit", "type", "node", "model", "gpus", "port", "state", "since", "pid",
    "restarts", "last_exit", "reason", "probe", "ready_seconds", "attempt", "attempt_limit",
    "replica", "rank", "nnodes", "devices", "liveness_failures", "served_names", "until",
}  # fmt: skip
TOP_KEYS = {
    "format", "invocation_id", "launcher", "state_dir", "unit_dir", "pid", "started_at",
    "ended_at", "uptime", "live", "stopping", "result", "lanes", "instances", "containment",
    "ends_at", "time_left", "efficiency", "endpoint", "record_incomplete", "attempt",
}  # fmt: skip


def _rows(text: str) -> dict[str, list[str]]:
    return {
        line.split()[0]: line.split()
        for line in text.splitlines()
        if "@" in line[:8] or line.startswith("flaky")
    }


def test_status_of_a_live_run_then_of_the_finished_run(tmp_path: Path) -> None:
    with live_run(tmp_path) as run:
        state = str(run.state)
        shown = ddsup("status", "--state-dir", state)
        assert shown.returncode == 0, shown.stderr
        text = shown.stdout
        invocation = json.loads((run.state / "run.json").read_text())["invocation_id"]
        assert f"run {invocation} · launcher local · up " in text
        assert "lanes ready: ma 2/2 · mb 2/2" in text
        assert not ANSI.search(text.encode()), "piped output must be plain"
        rows = _rows(text)
        pids = {e["instance"]: e["pid"] for e in events(run.state) if e["event"] == "process"}
        for lane in LANES:
            node = "node0" if lane.startswith("alpha") else "node1"
            assert rows[lane][1:3] == [node, "ready"], rows[lane]
            assert rows[lane][4] == str(pids[lane])
            assert rows[lane][-1] == ("ok" if lane.startswith("alpha") else "none")
        assert rows["flaky"][2] == "failed" and rows["flaky"][6:8] == ["code", "3"]

        data = json.loads(ddsup("status", "--json", "--state-dir", state).stdout)
        assert set(data) == TOP_KEYS and data["format"] == 1 and data["live"] is True
        assert data["invocation_id"] == invocation and data["launcher"] == "local"
        assert data["lanes"] == {"ma": {"ready": 2, "total": 2}, "mb": {"ready": 2, "total": 2}}
        assert isinstance(data["uptime"], float) and data["result"] is None
        supervisors = {(c["supervisor"], c["node"]) for c in data["containment"]}
        assert supervisors == {
            ("controller", None),
            ("agent-node0", "node0"),
            ("agent-node1", "node1"),
        }
        assert all("process group" in c["summary"] for c in data["containment"])
        assert "no-orphan layers" not in text  # a person asking where the run is
        verbose = ddsup("status", "-v", "--state-dir", state).stdout
        assert "no-orphan layers of controller: " in verbose, verbose
        assert data["efficiency"]["allocation_gpus"] == 4 and not data["efficiency"]["finished"]
        by_name = {i["instance"]: i for i in data["instances"]}
        assert all(set(i) == INSTANCE_KEYS for i in data["instances"])
        assert by_name["beta@1"]["node"] == "node1" and by_name["beta@1"]["model"] == "mb"
        assert by_name["beta@1"]["served_names"] == ["mb"]
        assert by_name["beta@1"]["gpus"] == [1] and isinstance(by_name["beta@1"]["port"], int)
        assert by_name["alpha@0"]["ready_seconds"] >= 0 and by_name["alpha@0"]["probe"] == "ok"
        assert by_name["flaky"]["last_exit"] == {"code": 3} and by_name["flaky"]["restarts"] >= 1

        metrics = ddsup("status", "--metrics", "--state-dir", state).stdout
        assert 'ddsup_lanes_ready{model="ma"} 2' in metrics
        assert 'ddsup_lanes{model="mb"} 2' in metrics
        assert (
            'ddsup_unit_state{instance="beta@0",node="node1",unit="beta@",state="ready"} 1'
            in metrics
        )
        assert (
            'ddsup_unit_state{instance="flaky",node="node0",unit="flaky",state="failed"} 1'
            in metrics
        )
        assert re.search(r'ddsup_unit_ready_seconds\{instance="alpha@1"\} [0-9.]+\n', metrics)
        assert "ddsup_run_uptime_seconds " in metrics

        stop = ddsup("stop", "--state-dir", state)
        assert stop.returncode == 0, stop.stderr
        assert f"stopping run {invocation}" in stop.stdout
        assert "stopped: stopped, exit 143 (ddsup stop)" in stop.stdout
        assert run.wait() == 143
        assert re.search(
            r"ddsup: GPU time [0-9.]+ (s|min|h) \(4 GPUs × \S+\): loading \d+ %", run.text()
        ), run.text()
        # stop is idempotent: a finished run is no error
        again = ddsup("stop", "--state-dir", state)
        assert again.returncode == 0 and "has already finished: stopped, exit 143" in again.stdout

        after = json.loads(ddsup("status", "--json", "--state-dir", state).stdout)
        assert set(after) == TOP_KEYS and after["live"] is False and after["uptime"] is None
        assert after["result"]["status"] == "stopped" and after["result"]["exit_code"] == 143
        assert isinstance(after["ended_at"], float)
        assert {i["instance"]: i["state"] for i in after["instances"]}["alpha@0"] == "exited"
        assert after["lanes"]["ma"] == {"ready": 0, "total": 2}
        finished = ddsup("status", "--state-dir", state).stdout
        assert "finished: stopped, exit 143 (ddsup stop) · ran " in finished
        offline = ddsup("status", "--metrics", "--state-dir", state).stdout
        assert (
            'ddsup_unit_state{instance="alpha@0",node="node0",unit="alpha@",state="exited"} 1'
            in offline
        )
        assert "ddsup_run_uptime_seconds" not in offline
        # the run's own output is plain lines in a file (no redraws, no colour)
        output = run.output.read_bytes()
        assert b"\r" not in output and not ANSI.search(output)
        assert b"beta@1 (node1): ready" in output and b"lanes ready " in output


def test_status_finds_the_newest_run_here_and_colours_a_terminal(tmp_path: Path) -> None:
    older = tmp_path / "ddsup-20200101-000000"  # an older run here: not the one shown
    older.mkdir()
    (older / "run.json").write_text(json.dumps({"invocation_id": "old", "pid": 1}))
    os.utime(older / "run.json", (1e9, 1e9))
    argv = [PY, "-m", "ddsup", "status"]
    with live_run(tmp_path, state_name="ddsup-x") as run, on_pty(argv, tmp_path) as (_, tty):
        screen = tty.read_to_end()
        assert f"state dir {run.state}".encode() in screen
        assert b"\x1b[32m\xe2\x97\x8f ready" in screen  # green ● ready
        assert b"\x1b[31m\xe2\x9c\x97 failed" in screen  # red ✗ failed


def test_logs_of_local_and_remote_instances(tmp_path: Path) -> None:
    with live_run(tmp_path) as run:
        state = str(run.state)
        one = ddsup("logs", "alpha@1", "--state-dir", state)
        assert one.returncode == 0 and "hello from alpha@1\n" in one.stdout
        assert not one.stdout.startswith("alpha@1:")
        remote = ddsup("logs", "beta", "--state-dir", state).stdout  # node1, via its agent
        assert remote.splitlines() == [
            "beta@0: beta line one beta@0",
            "beta@0: beta line two beta@0",
            "beta@1: beta line one beta@1",
            "beta@1: beta line two beta@1",
        ]
        last = ddsup("logs", "beta@", "-n", "1", "--state-dir", state).stdout
        assert last.splitlines() == ["beta@0: beta line two beta@0", "beta@1: beta line two beta@1"]
        assert (
            "beta line one"
            in ddsup("logs", "beta@0", "--since", "10m", "--state-dir", state).stdout
        )
        future = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() + 3600))
        assert ddsup("logs", "beta@0", "--since", future, "--state-dir", state).stdout == ""
        bad = ddsup("logs", "gamma", "--state-dir", state)
        assert bad.returncode == 64 and "no log for 'gamma'; known: " in bad.stderr
        assert "alpha@0" in bad.stderr and "Traceback" not in bad.stderr
        worse = ddsup("logs", "beta@0", "--since", "yesterday-ish", "--state-dir", state)
        assert worse.returncode == 64 and "--since 'yesterday-ish'" in worse.stderr

        follower = subprocess.Popen(
            [PY, "-m", "ddsup", "logs", "-f", "alpha", "--state-dir", state],
            stdout=subprocess.PIPE, text=True, env=env(),
        )  # fmt: skip
        try:
            assert ddsup("stop", "--state-dir", state).returncode == 0
            out, _ = follower.communicate(timeout=20)  # -f ends when the run has ended
        finally:
            if follower.poll() is None:
                follower.kill()
                follower.wait()
        assert follower.returncode == 0
        assert "alpha@0: hello from alpha@0" in out and "alpha@1: hello from alpha@1" in out


def test_no_secret_in_anything_ddsup_writes_or_prints(tmp_path: Path) -> None:
    with live_run(tmp_path) as run:
        state = str(run.state)
        seen = [
            ddsup("status", "--state-dir", state),
            ddsup("status", "--json", "--state-dir", state),
            ddsup("status", "--metrics", "--state-dir", state),
            ddsup("logs", "agent-node0", "--state-dir", state),
            ddsup("logs", "agent-node1", "--state-dir", state),
            ddsup("stop", "--state-dir", state),
        ]
        run.wait()
        seen += [
            ddsup("status", "--state-dir", state),
            ddsup("status", "--json", "--state-dir", state),
            ddsup("status", "--metrics", "--state-dir", state),
        ]
        import hashlib

        token = hashlib.sha256(SECRET.encode()).hexdigest()
        assert f"token {token}" in (run.state / "logs" / "alpha@0.log").read_text(), "unit got it"
        files = [p for p in run.state.rglob("*") if p.is_file() and p.parent.name != "logs"]
        files += list((run.state / "logs").glob("agent*.log"))
        assert {p.name for p in files} >= {"events.jsonl", "plan.json", "result.json", "run.json"}
        texts = [s.stdout + s.stderr for s in seen] + [run.text()]
        texts += [p.read_text(errors="replace") for p in files]
        leaks = [t[:200] for t in texts if SECRET in t]
        assert not leaks


def test_start_on_a_terminal_shows_a_progress_line(tmp_path: Path) -> None:
    from control_helpers import write_units

    units = write_units(
        tmp_path / "units",
        {  # a lane that takes a while to be ready: the progress line waits on it
            "gamma@.toml": """
[unit]
type = "lane"
[service]
exec = ["sleep", "300"]
[ready]
exec = ["sh", "-c", "test -e {state_dir}/go"]
interval = "50ms"
[lane]
model = "mc"
gpus = 1
replicas = 1
"""
        },
    )
    state = tmp_path / "state"
    argv = start_argv(units, state, *simulated(2, 2), verbose=False)
    with on_pty(argv, tmp_path) as (process, tty):
        screen = tty.read_until("lanes ready 3/4 · waiting on gamma@0 (node".encode())
        line = screen.rsplit(b"\r\x1b[K", 1)[-1]
        assert re.match(rb"lanes ready 3/4 \xc2\xb7 waiting on gamma@0 \(node\d\) \d+s", line), line
        wait_for(lambda: (state / "events.jsonl").exists(), "events")
        (state / "go").touch()
        tty.read_until(b"gamma@0 (node")
        wait_for(
            lambda: any(
                e.get("instance") == "gamma@0" and e.get("to") == "ready" for e in events(state)
            ),
            "gamma ready",
        )
        assert ddsup("stop", "--state-dir", str(state)).returncode == 0
        assert process.wait(timeout=20) == 143
        screen = tty.read_to_end(limit=5)
        assert b"\x1b[32m\xe2\x97\x8f ready\x1b[0m" in screen  # coloured state changes
        tail = screen.rsplit(b"finished: stopped", 1)
        assert len(tail) == 2 and b"waiting on" not in tail[1]  # progress line gone at the end


def test_stop_and_status_of_a_run_whose_controller_was_killed(tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:  # a port nobody listens on any more
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dead = subprocess.Popen(["true"])
    dead.wait()
    state = tmp_path / "ddsup-killed"
    state.mkdir()
    run = {"invocation_id": "k1", "pid": dead.pid, "launcher": "local", "started_at": 1.0}
    (state / "run.json").write_text(
        json.dumps({**run, "control": {"host": "127.0.0.1", "port": port}})
    )
    (state / "control.secret").write_text("x\n")
    planned = {
        "instance": "lane@0",
        "unit": "lane@",
        "type": "lane",
        "node": "n0",
        "gpus": [0],
        "port": 8000,
    }
    (state / "plan.json").write_text(json.dumps({"instances": [planned]}))
    lines = [
        {
            "time": 2.0,
            "event": "unit",
            "instance": "lane@0",
            "node": "n0",
            "to": "starting",
            "restarts": 0,
        },
        {"time": 2.1, "event": "process", "instance": "lane@0", "node": "n0", "pid": 4242},
    ]
    (state / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    stop = ddsup("stop", cwd=tmp_path)
    assert stop.returncode == 0 and "run k1 is not running" in stop.stdout, stop
    shown = ddsup("status", cwd=tmp_path)
    assert "not answering and no result.json" in shown.stdout
    data = json.loads(ddsup("status", "--json", cwd=tmp_path).stdout)
    assert data["live"] is False and data["result"] is None
    assert data["instances"][0]["state"] == "starting" and data["instances"][0]["pid"] == 4242
