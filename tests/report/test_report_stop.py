"""A clean stop is not a fault: requests cut by ``ddsup stop`` are counted apart.

A real run (two ``ddsup fake-vllm`` lanes that take 30 s to answer, the endpoint, a
worker with eight requests in flight) is stopped with ``ddsup stop``; the worker goes
first, its requests are cut, and the report must count them as cut short, not as failed
lane attempts, and draw them grey, not as the red errors of the request chart. The
series' own counting (a cut, a failure, an answer) is checked on the recorder.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import trio

from ddsup.endpoint._timeseries import SeriesRecorder
from ddsup.ops.report import build_report, render_report
from ddsup.record import load_run
from ddsup.record._series import CUT, FAILED, FINISHED, read_series
from support.polls import until
from support.ports import free_port
from support.runs import running

IN_FLIGHT = 8
WORKER = f"""
import json, os, threading, time, urllib.request

def post():
    body = json.dumps({{"model": "slow", "prompt": "hi", "max_tokens": 2}}).encode()
    request = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/completions", data=body,
                                     headers={{"content-type": "application/json"}})
    urllib.request.urlopen(request, timeout=120).read()

for _ in range({IN_FLIGHT}):
    threading.Thread(target=post, daemon=True).start()
time.sleep(300)
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
        "--ttft", "30"]
timeout_stop = "5s"
[ready]
http = "http://{{host}}:{{port}}/health"
interval = "100ms"
[lane]
model = "slow"
gpus = 1
replicas = 2
port = "auto"
stagger = "0s"
"""
    )
    (directory / "endpoint.toml").write_text(
        f'[unit]\ntype = "endpoint"\n[endpoint]\nport = {free_port()}\n'
    )
    (directory / "worker.py").write_text(WORKER)
    (directory / "worker.toml").write_text(
        f'[unit]\ntype = "worker"\n[service]\nexec = [{python}, "{{unit_dir}}/worker.py"]\n'
    )
    return directory


def _outstanding(state: Path) -> int:
    lines = read_series(state).lines
    return int(lines[-1].total(3)) if lines else 0  # OUTSTANDING of the latest line


@pytest.mark.slow
async def test_requests_cut_by_ddsup_stop_are_no_lane_failures(tmp_path: Path) -> None:
    state = tmp_path / "state"
    async with running(
        _units(tmp_path / "units"), state, "--nodes", "1", "--gpus-per-node", "2"
    ) as run:
        await run.wait_ready("worker", limit=60)
        await until(lambda: _outstanding(state) == IN_FLIGHT, "every request at a lane")
        stop = [sys.executable, "-m", "ddsup", "stop", "--state-dir", str(state)]
        with trio.fail_after(60):
            await trio.run_process(stop, capture_stdout=True, capture_stderr=True)
        await run.wait(limit=60)

    report = build_report(load_run(state), now=10**10)
    totals = report.totals
    assert (totals.answered, totals.failed, totals.cut) == (0, 0, IN_FLIGHT), totals
    page = render_report(report)
    assert f"0 failed lane attempts, {IN_FLIGHT} cut short by the client or a stop" in page
    rates = page[page.index('<svg class="rates"') :]
    rates = rates[: rates.index("</svg>")]
    assert 'class="r-cut"' in rates and 'class="r-errors"' not in rates


def test_the_recorder_counts_cuts_apart_from_failures(tmp_path: Path) -> None:
    recorder = SeriesRecorder(tmp_path)
    for status in (200, 429, 0, 502, CUT, CUT):
        recorder.started("a@0")
        recorder.finished("a@0", status)
    line = recorder.take(0.0)
    assert line["counts"][FINISHED] == 2 and line["counts"][FAILED] == 2
    assert line["cut"] == {"a@0": 2}
    recorder.started("a@0")
    recorder.finished("a@0", 200)
    assert "cut" not in recorder.take(0.0)  # only lines that had cuts say so
