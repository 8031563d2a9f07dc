"""``ddsup restart`` against a live run: a rolling restart under load fails no request.

Two fake-vllm lanes serve a client that streams completions four at a time through the
built-in endpoint. The lanes stop with SIGKILL (``kill_signal``), so a lane stopped with
a stream in flight would cut that stream short, which the client counts as a failure:
only the endpoint draining the lane first (out of the rotation, in-flight streams done)
keeps the count at zero. The rolling restart must also do one lane at a time, each
ready again before the next leaves the rotation.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from control_helpers import ddsup, events, wait_for

from support.ports import free_port
from support.runs import end, simulated, start_process

LANE = """
[unit]
type = "lane"
[service]
exec = ["ddsup", "fake-vllm", "--port", "{port}", "--model", "{model}", "--tokens-per-second", "100"]
kill_signal = "SIGKILL"
timeout_stop = "10s"
[ready]
http = "http://{host}:{port}/health"
interval = "100ms"
[lane]
model = "m"
port = "auto"
stagger = "0s"
"""

# Streams 20-token completions through the endpoint, 4 at a time, until FLAG exists;
# writes {"ok": n, "failed": n, "done": [the wall time each good one ended]} to
# $DDSUP_STATE_DIR/client.json; exit 3 if any failed.
CLIENT = """
import json, os, sys, threading, time, urllib.request
base, flag = os.environ["OPENAI_BASE_URL"], sys.argv[1]
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
counts, lock = {"ok": 0, "failed": 0, "done": []}, threading.Lock()
def one():
    body = json.dumps({"model": "m", "prompt": "hi", "max_tokens": 20, "stream": True})
    request = urllib.request.Request(base + "/completions", body.encode(),
                                     {"Content-Type": "application/json"})
    try:
        with opener.open(request, timeout=30) as response:
            good = response.read().decode().rstrip().endswith("data: [DONE]")
    except Exception as err:
        print("failed:", err, flush=True)
        good = False
    with lock:
        counts["ok" if good else "failed"] += 1
        if good:
            counts["done"].append(time.time())
def loop():
    while not os.path.exists(flag):
        one()
threads = [threading.Thread(target=loop) for _ in range(4)]
for thread in threads: thread.start()
for thread in threads: thread.join()
with open(os.path.join(os.environ["DDSUP_STATE_DIR"], "client.json"), "w") as out:
    json.dump(counts, out)
sys.exit(3 if counts["failed"] else 0)
"""


def _units(path: Path, flag: Path, workers: int = 1) -> Path:
    path.mkdir(parents=True)
    (path / "lane@.toml").write_text(LANE)
    (path / "endpoint.toml").write_text(
        f'[unit]\ntype = "endpoint"\n[endpoint]\nport = {free_port()}\nworkers = {workers}\n'
    )
    (path / "client.py").write_text(CLIENT)
    (path / "worker.toml").write_text(
        f'[unit]\ntype = "worker"\n[service]\nexec = ["python3", "{{unit_dir}}/client.py", "{flag}"]\n'
    )
    return path


def _transitions(state: Path, instance: str) -> list[tuple[float, str]]:
    return [
        (e["time"], e["to"])
        for e in events(state)
        if e.get("event") == "unit" and e.get("instance") == instance
    ]


@pytest.mark.parametrize("workers", [1, 2], ids=["one-process", "two-workers"])
def test_a_rolling_restart_under_load_drains_each_lane_and_fails_no_request(
    tmp_path: Path, workers: int
) -> None:
    """With two endpoint workers, in-flight counts are summed across processes."""
    flag = tmp_path / "stop"
    units = _units(tmp_path / "units", flag, workers)
    state = tmp_path / "state"
    with (tmp_path / "start.out").open("wb") as sink:
        run = start_process(units, state, *simulated(1, 2), output=sink, verbose=True)
    try:
        wait_for(lambda: any(t == "ready" for _, t in _transitions(state, "worker")), "the worker")
        wait_for(lambda: (state / "logs" / "lane@1.log").stat().st_size > 0, "traffic")
        done = ddsup("restart", "lane", "--rolling", "--state-dir", str(state), timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        steps = [line.split("ddsup: ", 1)[1] for line in done.stdout.splitlines()]
        assert steps == [
            "restarting lane@0, lane@1 (one at a time; lanes drain first)",
            "lane@0: draining",
            "lane@0: restarting",
            "lane@0: ready",
            "lane@1: draining",
            "lane@1: restarting",
            "lane@1: ready",
            "every instance is ready again",
        ]
        flag.touch()
        assert run.wait(timeout=60) == 0, (tmp_path / "start.out").read_text()
    finally:
        end(run)
    counts = json.loads((state / "client.json").read_text())
    assert counts["failed"] == 0, counts
    lane0, lane1 = _transitions(state, "lane@0"), _transitions(state, "lane@1")
    left0, left1 = (next(t for t, to in lane if to == "restarting") for lane in (lane0, lane1))
    back0, back1 = ([t for t, to in lane if to == "ready"][1] for lane in (lane0, lane1))
    assert back0 <= left1  # one at a time: lane@1 went only once lane@0 was back
    # served all along: while each lane was away, requests went on ending well on the other
    # (a count of requests in all depended on how fast the machine restarted the lanes)
    for left, back in ((left0, back0), (left1, back1)):
        assert any(left <= t <= back for t in counts["done"]), (left, back, counts)
    reasons = [e["reason"] for e in events(state) if e.get("to") == "restarting"]
    assert reasons == ["restart requested (ddsup restart)"] * 2
    restarts = [
        e["restarts"] for e in events(state) if e.get("instance") == "lane@0" and "restarts" in e
    ]
    assert restarts[-1] == 1  # counted as a restart, not against the start limit


def test_restart_refusals_say_why(tmp_path: Path) -> None:
    flag = tmp_path / "stop"
    units = _units(tmp_path / "units", flag)
    state = tmp_path / "state"
    with (tmp_path / "start.out").open("wb") as sink:
        run = start_process(units, state, *simulated(1, 2), output=sink, verbose=True)
    try:
        wait_for(lambda: any(t == "ready" for _, t in _transitions(state, "worker")), "the worker")
        worker = ddsup("restart", "worker", "--state-dir", str(state))
        assert worker.returncode == 1
        assert "cannot restart: worker: the worker's end ends the run" in worker.stderr
        unknown = ddsup("restart", "lame", "--state-dir", str(state))
        assert unknown.returncode == 1 and "no unit instance 'lame' in this run" in unknown.stderr
        flag.touch()
        assert run.wait(timeout=60) == 0
    finally:
        end(run)
    gone = ddsup("restart", "lane", "--state-dir", str(state))
    assert gone.returncode == 1 and "is not running (or does not answer)" in gone.stderr
    assert "Traceback" not in gone.stderr
