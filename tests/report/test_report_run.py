"""Real runs: the numbers of a run with known timings, and the rehearsal's report.

The known run is real ``ddsup start``: two ``ddsup fake-vllm`` lanes that load for 2 s
(``--startup-delay``) and take 1.5 s per request (``--ttft``), the second one 0.5 s later
(``stagger``), and a worker that waits 1 s, sends two rounds of two concurrent requests
(one per lane: the endpoint picks the lane with fewer outstanding), waits 1.5 s and
exits. Each lane therefore serves 3 s; the worker writes down when it sent its first
request and got its last answer, and the report must agree.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from functools import partial
from pathlib import Path

import pytest
import trio

from ddsup.ops.report import Rows, build_report, render_report
from ddsup.record import efficiency_json, efficiency_line, load_run
from ddsup.record._efficiency import efficiency_of
from support.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
REHEARSAL = ROOT / "units" / "examples" / "rehearsal"
LINE = re.compile(
    r"GPU time [\d.]+ (s|min) \(\d+ GPUs × [\w.]+\): loading \d+ %, serving \d+ %, idle \d+ %, "
    r"down \d+ %( \(lanes not started yet, restarting, stopping or ended\))?(, unused \d+ %)?"
)

WORKER = """
import json, os, threading, time, urllib.request

def post():
    body = json.dumps({"model": "known", "prompt": "hi", "max_tokens": 2}).encode()
    request = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/completions", data=body,
                                     headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200
        response.read()

time.sleep(1.0)
first = time.time()
for _ in range(2):
    threads = [threading.Thread(target=post) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
last = time.time()
with open(os.path.join(os.environ["DDSUP_STATE_DIR"], "worker-times.json"), "w") as out:
    json.dump({"first": first, "last": last}, out)
time.sleep(1.5)
"""


def _units(directory: Path) -> Path:
    directory.mkdir()
    python = json.dumps(sys.executable)
    (directory / "lane@.toml").write_text(
        f"""
[unit]
type = "lane"
[service]
exec = [{python}, "-m", "ddsup", "fake-vllm", "--port", "{{port}}", "--model", "{{model}}",
        "--startup-delay", "2", "--ttft", "1.5"]
timeout_start = "60s"
timeout_stop = "5s"
[ready]
http = "http://{{host}}:{{port}}/health"
interval = "100ms"
[lane]
model = "known"
gpus = 1
replicas = 2
port = "auto"
stagger = "500ms"
"""
    )
    (directory / "endpoint.toml").write_text(
        f"""
[unit]
type = "endpoint"
[service]
exec = [{python}, "-m", "ddsup", "endpoint"]
timeout_start = "30s"
[ready]
http = "http://{{host}}:{{port}}/health"
interval = "100ms"
[endpoint]
port = {free_port()}
"""
    )
    (directory / "worker.py").write_text(WORKER)
    (directory / "worker.toml").write_text(
        f"""
[unit]
type = "worker"
after = ["endpoint"]
requires = ["endpoint"]
[service]
exec = [{python}, "{{unit_dir}}/worker.py"]
"""
    )
    return directory


async def _start(units: Path, state: Path, *extra: str) -> None:
    argv = [sys.executable, "-m", "ddsup", "start", str(units), "--launcher", "local"]
    argv += [*extra, "--state-dir", str(state)]
    with trio.fail_after(150):
        done = await trio.run_process(argv, capture_stdout=True, capture_stderr=True, check=False)
    assert done.returncode == 0, done.stderr.decode()[-3000:]


@pytest.mark.slow
async def test_a_run_with_known_timings(tmp_path: Path) -> None:
    state = tmp_path / "state"
    await _start(_units(tmp_path / "units"), state, "--gpus-per-node", "2")
    files = load_run(state)
    assert files.problems == ()
    eff = efficiency_of(files)
    worker = json.loads((state / "worker-times.json").read_text())
    lane0, lane1 = eff.lanes
    assert (lane0.instance, lane1.instance) == ("lane@0", "lane@1")
    for lane in eff.lanes:
        assert 2.0 <= lane.time.loading <= 4.5, lane  # 2 s of loading, plus Python's start
        assert 2.9 <= lane.time.serving <= 3.6, lane  # two requests of 1.5 s each
        assert lane.time.idle > 1.0 + 1.5  # the worker's two pauses at least
    waiting = [s for s in _life(files, "lane@1") if s[0] == "waiting"]
    assert len(waiting) == 1 and 0.45 <= waiting[0][1] <= 1.5  # the stagger, counted as down
    assert eff.first_request == pytest.approx(worker["first"], abs=0.25)
    assert eff.last_request == pytest.approx(worker["last"], abs=0.25)
    data = efficiency_json(state)
    assert data["last_request_before_end"] >= 1.5
    assert sum(data["shares"].values()) == pytest.approx(1.0, abs=1e-3)
    assert LINE.fullmatch(efficiency_line(state))
    page = render_report(build_report(files, eff.span.end, Rows.AUTO))
    assert page.count('class="s-serving"') >= 2
    assert "4 answered, 0 refused with 429" in page


def _life(files: object, instance: str) -> list[tuple[str, float]]:
    report = build_report(files, 0.0, Rows.INSTANCE)  # type: ignore[arg-type]
    rows = [r for g in report.groups for r in g.rows if r.instance == instance]
    return [(s.state, s.seconds) for s in rows[0].life.segments]


@pytest.mark.slow
async def test_the_rehearsal_produces_a_report(tmp_path: Path) -> None:
    state, units = tmp_path / "state", tmp_path / "rehearsal"
    shutil.copytree(REHEARSAL, units)  # on a free port: 9000 may be taken on a shared machine
    endpoint = units / "endpoint.toml"
    endpoint.write_text(endpoint.read_text().replace("port = 9000", f"port = {free_port()}"))
    await _start(units, state, "--nodes", "2", "--gpus-per-node", "2")
    argv = [sys.executable, "-m", "ddsup", "report", "--state-dir", str(state)]
    with trio.fail_after(60):
        done = await trio.run_process(argv, capture_stdout=True, capture_stderr=True, check=False)
    assert done.returncode == 0, done.stderr.decode()
    line, where = done.stdout.decode().splitlines()
    assert LINE.fullmatch(line) and where == f"report: {state / 'report.html'}"
    page = (state / "report.html").read_text()
    assert "300 answered" in page and "ok, exit 0 (worker: exit status 0)" in page
    for node in ("node0", "node1"):
        assert f">{node}<" in page


@pytest.mark.slow
async def test_a_live_run_is_reported_up_to_now(tmp_path: Path) -> None:
    """The report of a run still going: files being written, states that reach "now"."""
    units = _units(tmp_path / "units")
    (units / "worker.py").write_text("import time\ntime.sleep(60)\n")
    state = tmp_path / "state"
    argv = [sys.executable, "-m", "ddsup", "start", str(units), "--launcher", "local"]
    argv += ["--gpus-per-node", "2", "--state-dir", str(state)]
    async with trio.open_nursery() as nursery:
        run = await nursery.start(partial(trio.run_process, argv, check=False, capture_stderr=True))
        with trio.fail_after(60):
            while '"instance": "worker"' not in _text(state / "events.jsonl"):  # noqa: ASYNC110
                await trio.sleep(0.1)  # another process writes it: a bounded poll
        report = [sys.executable, "-m", "ddsup", "report", "--state-dir", str(state)]
        done = await trio.run_process(report, capture_stdout=True, capture_stderr=True, check=False)
        assert done.returncode == 0, done.stderr.decode()
        page = (state / "report.html").read_text()
        assert "no result yet: live (or its controller was killed)" in page
        assert "lane@0 · ready" in page and "lane@1 · ready" in page
        stop = [sys.executable, "-m", "ddsup", "stop", "--state-dir", str(state)]
        await trio.run_process(stop, capture_stdout=True, capture_stderr=True)
    assert run.returncode == 143


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""
