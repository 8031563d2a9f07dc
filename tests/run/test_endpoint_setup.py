"""The endpoint ``ddsup start`` runs takes its ``[endpoint]`` section from the controller.

No command line carries the settings any more: the endpoint's lane-feed connection
brings the section as data first, then the ready lanes. These runs check what a user
sees of that: the section's port, key and routing are in force, and an ``api_key_env``
that names an unset variable stops the run before anything starts (64, no traceback).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from support.ports import free_port
from support.runs import run_start

# The worker: the endpoint answers on its planned URL, refuses a request without the key
# and lists the lane's model with it.
CHECK_PY = """\
import json, os, sys, urllib.error, urllib.request
url = os.environ["DDSUP_ENDPOINT_URL"] + "/v1/models"
try:
    urllib.request.urlopen(url, timeout=5)
    sys.exit("answered without the key")
except urllib.error.HTTPError as err:
    assert err.code == 401, err.code
request = urllib.request.Request(url, headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
with urllib.request.urlopen(request, timeout=5) as answer:
    models = [m["id"] for m in json.load(answer)["data"]]
assert models == ["m"], models
"""


def _units(path: Path, port: int) -> Path:
    path.mkdir()
    (path / "check.py").write_text(CHECK_PY)
    (path / "lane@.toml").write_text(
        """
[unit]
type = "lane"
[service]
exec = ["ddsup", "fake-vllm", "--port", "{port}", "--model", "{model}"]
timeout_stop = "5s"
[ready]
http = "http://{host}:{port}/health"
interval = "100ms"
[lane]
model = "m"
gpus = 1
replicas = 1
port = "auto"
"""
    )
    (path / "endpoint.toml").write_text(
        f"""
[unit]
type = "endpoint"
[service]
exec = ["ddsup", "endpoint", "--port", "1"]  # the section wins over flags
timeout_stop = "5s"
[ready]
http = "http://127.0.0.1:{port}/health"
interval = "100ms"
[endpoint]
port = {port}
api_key_env = "TEST_ENDPOINT_KEY"
"""
    )
    (path / "worker.toml").write_text(
        f'[unit]\ntype = "worker"\n[service]\nexec = [{json.dumps(sys.executable)}, "{{unit_dir}}/check.py"]\n'
    )
    return path


@pytest.mark.slow  # a node agent and fake-vllm: a few seconds
async def test_the_endpoint_serves_with_its_section(tmp_path: Path) -> None:
    units = _units(tmp_path / "units", free_port())
    env = {"TEST_ENDPOINT_KEY": "k3y-of-the-test"}
    run = await run_start(units, tmp_path / "state", "--gpus-per-node", "1", env=env, limit=120)
    assert run.returncode == 0, run.output[-3000:]
    assert run.result()["status"] == "ok"


async def test_an_unset_api_key_env_is_a_usage_error(tmp_path: Path) -> None:
    units = _units(tmp_path / "units", free_port())
    run = await run_start(units, tmp_path / "state", "--gpus-per-node", "1")
    assert run.returncode == 64, run.output
    assert run.output.count("api_key_env names TEST_ENDPOINT_KEY, which is not set") == 1
    assert "Traceback" not in run.output
    assert not run.state.exists()  # nothing began: no state directory
