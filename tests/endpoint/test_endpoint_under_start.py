"""``[endpoint] workers = 2`` under ``ddsup start``: the run's endpoint is two processes.

Real processes throughout: a ``ddsup fake-vllm`` lane, the endpoint fed live by the
controller, and a worker unit that reads the endpoint's ``endpoint-workers.json``,
sends requests through ``OPENAI_BASE_URL`` on fresh connections, asks ``ddsup status``
(which must show the endpoint's worker PIDs) and writes what it saw.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import psutil
import pytest
import trio

from support.ports import free_port

CLIENT = """\
import json, os, subprocess, sys, urllib.request
state = os.environ["DDSUP_STATE_DIR"]
with open(os.path.join(state, "endpoint-workers.json")) as handle:
    published = json.load(handle)
statuses = []
for _ in range(20):
    request = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"] + "/completions",
        data=json.dumps({"model": "m", "prompt": "hi", "max_tokens": 2}).encode(),
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        json.loads(response.read())
        statuses.append(response.status)
with urllib.request.urlopen(os.environ["DDSUP_ENDPOINT_URL"] + "/metrics", timeout=10) as r:
    metrics = r.read().decode()
status = [sys.executable, "-m", "ddsup", "status", "--state-dir", state]
as_json = json.loads(subprocess.run(status + ["--json"], capture_output=True, check=True).stdout)
as_text = subprocess.run(status, capture_output=True, check=True, text=True).stdout
with open(sys.argv[1], "w") as handle:
    json.dump(
        {
            "published": published,
            "statuses": statuses,
            "metrics": metrics,
            "status": as_json["endpoint"],
            "status_text": as_text,
        },
        handle,
    )
"""


def _units(path: Path, seen: Path) -> None:
    ddsup = json.dumps([sys.executable, "-m", "ddsup"])[1:-1]
    (path / "client.py").write_text(CLIENT)
    (path / "lane@.toml").write_text(
        f"""[unit]
type = "lane"
[service]
exec = [{ddsup}, "fake-vllm", "--port", "{{port}}", "--model", "{{model}}"]
timeout_stop = "5s"
[ready]
http = "http://{{host}}:{{port}}/health"
interval = "100ms"
[lane]
model = "m"
gpus = 1
replicas = 2
port = "auto"
stagger = "0s"
"""
    )
    (path / "endpoint.toml").write_text(
        f"""[unit]
type = "endpoint"
[service]
exec = [{ddsup}, "endpoint"]
timeout_start = "60s"
timeout_stop = "15s"
[ready]
http = "http://{{host}}:{{port}}/health"
interval = "100ms"
[endpoint]
port = {free_port()}
workers = 2
"""
    )
    (path / "worker.toml").write_text(
        f"""[unit]
type = "worker"
[service]
exec = [{json.dumps(sys.executable)}, "{{unit_dir}}/client.py", {json.dumps(str(seen))}]
"""
    )


@pytest.mark.slow
async def test_a_run_serves_through_two_endpoint_workers(tmp_path: Path) -> None:
    units, state, seen = tmp_path / "units", tmp_path / "state", tmp_path / "seen.json"
    units.mkdir()
    _units(units, seen)
    argv = [sys.executable, "-m", "ddsup", "start", str(units), "--state-dir", str(state)]
    argv += ["--launcher", "local", "--gpus-per-node", "2"]
    with trio.fail_after(180):
        done = await trio.run_process(argv, capture_stdout=True, capture_stderr=True, check=False)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    report = json.loads(seen.read_text())
    assert report["statuses"] == [200] * 20
    workers = report["published"]["workers"]
    assert len(workers) == 2
    for pid in workers:
        assert f'pid="{pid}"' in report["metrics"]
    assert report["status"] == report["published"]
    workers_line = f"workers {workers[0]}, {workers[1]}"
    assert f"endpoint pid {report['published']['pid']} " in report["status_text"]
    assert workers_line in report["status_text"]
    assert 'ddsup_endpoint_requests_total{model="m",status="200"} 20' in report["metrics"]
    assert not any(psutil.pid_exists(pid) for pid in [report["published"]["pid"], *workers])
    assert not (state / "endpoint-workers.json").exists()
