"""Lanes loading: a bound across the allocation, and a worker that need not wait for all.

``[lane] max_loading`` is checked on the ``starting`` → ``ready`` intervals of
``events.jsonl`` (how many overlap at any moment), never on durations. ``min_ready``
below 100 % is checked end to end: the worker starts while slow lanes still load, and
its later requests reach them, as those lanes' own request counters say.
"""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from support.ports import free_port
from support.runs import PY, Run, run_start
from support.unit_dirs import UnitDir

pytestmark = pytest.mark.slow  # node agents and fake vLLM lanes: several seconds each
FAKE_VLLM = (PY, "-m", "ddsup", "fake-vllm", "--port", "{port}")


def _fake_vllm_lane(units: UnitDir, name: str, delay: float, **lane: Any) -> None:
    units.add(
        name,
        "lane",
        [*FAKE_VLLM, "--model", "{model}", "--startup-delay", str(delay)],
        service={"timeout_stop": "5s"},
        ready={"http": "http://{host}:{port}/health", "interval": "50ms"},
        lane={"model": "m", "gpus": 1, "port": "auto", "stagger": "0s", **lane},
    )


def _intervals(run: Run) -> list[tuple[float, float]]:
    """Each lane's first starting → ready, as events.jsonl has them."""
    lanes = sorted(
        {e["instance"] for e in run.events() if e.get("instance", "").startswith("lane@")}
    )
    return [(run.times(i, "starting")[0], run.times(i, "ready")[0]) for i in lanes]


def _most_at_once(intervals: list[tuple[float, float]]) -> int:
    """The most intervals that overlap at one moment (a start at another's ready: not)."""
    edges = sorted([(s, 1) for s, _ in intervals] + [(r, -1) for _, r in intervals])
    most = now = 0
    for _at, step in edges:  # ends sort before starts at the same time
        now += step
        most = max(most, now)
    return most


@pytest.mark.parametrize("bound", [1, 2, None], ids=["max-1", "max-2", "unbounded"])
async def test_max_loading_bounds_the_lanes_loading_at_once(
    tmp_path: Path, bound: int | None
) -> None:
    """Four lanes on four nodes, each loading for a second; a worker after all of them."""
    units = UnitDir(tmp_path / "units")
    _fake_vllm_lane(units, "lane@", 1.0, replicas=4, **({"max_loading": bound} if bound else {}))
    units.add("worker", "worker", ["true"], unit={"after": ["lane"]})
    run = await run_start(
        units, tmp_path / "state", "--nodes", "4", "--gpus-per-node", "1", limit=60
    )

    assert run.returncode == 0, run.describe()
    intervals = _intervals(run)
    assert len(intervals) == 4
    if bound is None:  # without a bound every node starts its lane at once
        assert _most_at_once(intervals) == 4, intervals
        return
    assert _most_at_once(intervals) == bound, intervals
    if bound == 1:  # one at a time: in plan order, each after the one before is ready
        assert all(ready <= start for (_, ready), (start, _) in pairwise(intervals))


CLIENT_PY = """\
import json, os, time, urllib.request
state = os.environ["DDSUP_STATE_DIR"]
plan = json.load(open(os.path.join(state, "plan.json")))
lanes = {str(i["port"]): i["instance"] for i in plan["instances"] if i["type"] == "lane"}
seen = []
deadline = time.monotonic() + 30
body = json.dumps({"model": "m", "prompt": "hi", "max_tokens": 2}).encode()
while time.monotonic() < deadline and set(lanes.values()) - {lane for _, lane in seen}:
    request = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"] + "/completions", data=body,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        seen.append((time.time(), lanes[answer.headers["x-fake-vllm-lane"]]))
    time.sleep(0.05)
counted = {}
for port, instance in lanes.items():  # each lane's own count of the requests it served
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as page:
        text = page.read().decode()
    counted[instance] = sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
        if line.startswith("vllm:request_success_total{")
    )
with open(os.path.join(state, "client.json"), "w") as out:
    json.dump({"seen": seen, "counted": counted}, out)
"""


async def test_min_ready_below_100_percent_end_to_end(tmp_path: Path) -> None:
    """One fast lane and two slow ones serve model m; min_ready = 1 starts the endpoint,
    and so the worker, on the fast lane alone; the slow ones join the rotation."""
    units = UnitDir(tmp_path / "units")
    (units.path / "client.py").write_text(CLIENT_PY)
    _fake_vllm_lane(units, "lane@", 0.0, replicas=1)
    _fake_vllm_lane(units, "slow@", 4.0, replicas=2)
    units.add("worker", "worker", [PY, units.script("client.py")])
    port = free_port()
    # by load: the client sends one prompt again and again, which routing by prefix would
    # keep on the lane that has it (and the test is about lanes joining the rotation)
    (units.path / "endpoint.toml").write_text(
        f'[unit]\ntype = "endpoint"\n[endpoint]\nport = {port}\nmin_ready = 1\n'
        'routing = "least-load"\n'
    )
    run = await run_start(
        units, tmp_path / "state", "--nodes", "1", "--gpus-per-node", "3", limit=60
    )

    assert run.returncode == 0, run.describe() + (run.state / "logs/worker.log").read_text()
    client = json.loads((run.state / "client.json").read_text())
    worker_start = run.times("worker", "starting")[0]
    for slow in ("slow@0", "slow@1"):
        ready = run.times(slow, "ready")[0]
        assert worker_start < ready, f"the worker waited for {slow}"
        assert client["counted"][slow] >= 1, client  # the lane's own counter
        reached = [at for at, lane in client["seen"] if lane == slow]
        assert reached and min(reached) >= ready, (slow, ready, client["seen"])
    assert client["seen"][0][1] == "lane@0"  # the first request: only the fast lane
