"""API keys reach only the processes that use them (the endpoint's keys on a run).

The client's key (``[endpoint] api_key_env``) sat in every unit's and every agent's
environment; docs said the worker only. Now it reaches the endpoint and the worker; a
lane's own key (``[lane] api_key_env``) reaches that lane and the endpoint, and travels
to the endpoint as a name in the lane feed, never as a value. Each unit here writes its
environment (and its parent's, for a lane: its node agent) to a file; the run ends 0.
"""

from __future__ import annotations

import json
import socket
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

from ddsup.channel._codec import decode, encode
from ddsup.channel._messages import PreflightReport
from ddsup.decide._run_inputs import Observed, PreflightOver, PreflightReported, PublishLanes
from ddsup.decide._run_state import RunState
from ddsup.record._events import UnitTransition
from ddsup.record._states import InstanceState as S
from support import units as u
from support.runs import PY, run_start, simulated
from support.unit_dirs import UnitDir

# Writes {"own": environ, "parent": parent's environ, "parent_argv": its command line} to
# argv[1], then execs argv[2:].
DUMP_PY = """\
import json, os, sys
def environ(pid):
    data = open(f"/proc/{pid}/environ", "rb").read()
    return dict(i.decode().partition("=")[::2] for i in data.split(b"\\0") if i)
def argv(pid):
    return [w.decode() for w in open(f"/proc/{pid}/cmdline", "rb").read().split(b"\\0") if w]
with open(sys.argv[1] + ".tmp", "w") as handle:
    parent = os.getppid()
    json.dump({"own": dict(os.environ), "parent": environ(parent), "parent_argv": argv(parent)},
              handle)
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
if sys.argv[2:]:
    os.execvp(sys.argv[2], sys.argv[2:])
"""
CLIENT_KEY, LANE_KEY = f"client-{uuid.uuid4().hex}", f"lane-{uuid.uuid4().hex}"
SLEEP = [PY, "-c", "import time; time.sleep(60)"]  # extra argv (the feed's flag) is ignored


def _units(tmp_path: Path, dumps: Path, *, lane_key: bool) -> UnitDir:
    units = UnitDir(tmp_path / "units")
    (units.path / "dump.py").write_text(DUMP_PY)

    def dumping(*then: str) -> list[str]:
        return [PY, units.script("dump.py"), f"{dumps}/{{instance}}.json", *then]

    ready = {"exec": ["test", "-s", f"{dumps}/{{instance}}.json"], "interval": "20ms"}
    lane = {"model": "m", "gpus": 1, "replicas": 2, "port": "auto", "stagger": "0s"}
    if lane_key:
        lane["api_key_env"] = "LANE_KEY"
    units.add("lane@", "lane", dumping(*SLEEP), ready=ready, lane=lane)
    units.add("svc", "service", dumping(*SLEEP), ready=ready)
    units.add(
        "endpoint",
        "endpoint",
        dumping(*SLEEP),
        ready=ready,
        endpoint={"api_key_env": "CLIENT_KEY", "port": 19999},
    )
    units.add("worker", "worker", dumping(), unit={"after": ["svc"]})
    return units


async def _environments(tmp_path: Path, *, lane_key: bool) -> dict[str, dict[str, Any]]:
    """Every unit's environment ("own") and its parent's, after a run with both keys set."""
    dumps = tmp_path / "env"
    dumps.mkdir()
    run = await run_start(
        _units(tmp_path, dumps, lane_key=lane_key),
        tmp_path / "state",
        *simulated(2, 1),
        env={"CLIENT_KEY": CLIENT_KEY, "LANE_KEY": LANE_KEY},
    )
    assert run.returncode == 0, run.describe()
    assert CLIENT_KEY not in (tmp_path / "state" / "events.jsonl").read_text()
    seen = {p.stem: json.loads(p.read_text()) for p in dumps.glob("*.json")}
    assert set(seen) == {"lane@0", "lane@1", "svc", "endpoint", "worker"}
    return seen


def _keys(env: dict[str, str]) -> set[str]:
    return {k for k, v in env.items() if v in (CLIENT_KEY, LANE_KEY)}


async def test_the_client_key_reaches_the_endpoint_and_the_worker_only(tmp_path: Path) -> None:
    seen = await _environments(tmp_path, lane_key=False)
    assert "CLIENT_KEY" in _keys(seen["endpoint"]["own"])
    assert _keys(seen["worker"]["own"]) >= {"CLIENT_KEY", "OPENAI_API_KEY"}
    for name in ("lane@0", "lane@1", "svc"):
        assert "CLIENT_KEY" not in _keys(seen[name]["own"]), name
    for lane in ("lane@0", "lane@1"):  # a lane's parent is its node's agent
        agent, argv = seen[lane]["parent"], seen[lane]["parent_argv"]
        assert argv[argv.index("--node") + 1] == seen[lane]["own"]["DDSUP_NODE"], argv
        assert agent.get("DDSUP_INVOCATION_ID") == seen[lane]["own"]["DDSUP_INVOCATION_ID"]
        assert "CLIENT_KEY" not in agent


async def test_a_lane_key_reaches_its_lane_and_the_endpoint_only(tmp_path: Path) -> None:
    seen = await _environments(tmp_path, lane_key=True)
    assert _keys(seen["endpoint"]["own"]) == {"CLIENT_KEY", "LANE_KEY"}
    assert _keys(seen["worker"]["own"]) == {"CLIENT_KEY", "OPENAI_API_KEY"}
    assert _keys(seen["lane@0"]["own"]) == _keys(seen["lane@1"]["own"]) == {"LANE_KEY"}
    assert _keys(seen["svc"]["own"]) == set()


def test_the_lane_feed_names_a_lane_s_key_variable_never_its_value() -> None:
    """``[lane] api_key_env`` reaches the endpoint in each ready lane of the feed."""
    keyed = u.lane("a@", replicas=1, service={})
    keyed = replace(keyed, lane=replace(keyed.lane, api_key_env="LANE_KEY"))  # type: ignore[arg-type]
    units = u.unit_set(keyed, u.lane("b@", replicas=1), u.endpoint())
    run = RunState(units, u.plan(units))
    for node in run.layout.agent_nodes():
        run.handle(PreflightReported(PreflightReport(node)))
    run.handle(PreflightOver(120.0))
    published = []
    for instance in ("a@0", "b@0"):
        event = UnitTransition(
            instance=instance, node="n1", from_state=S.STARTING, to_state=S.READY, reason="ok"
        )
        published += [d.changed for d in run.handle(Observed(event)) if isinstance(d, PublishLanes)]
    keys = {lane.instance: lane.api_key_env for change in published for lane in change.added}
    assert keys == {"a@0": "LANE_KEY", "b@0": None}
    assert all(decode(encode(change)) == change for change in published)
    whole = run.ready_lanes()  # what a new subscriber gets first
    assert {lane.instance: lane.api_key_env for lane in whole.lanes} == keys
    assert decode(encode(whole)) == whole


# The worker: one completion through the endpoint with the client's key; exit 0 on 200.
ASK_PY = """\
import json, os, sys, urllib.request
body = json.dumps({"model": "m", "prompt": "hi", "max_tokens": 2}).encode()
request = urllib.request.Request(
    os.environ["OPENAI_BASE_URL"] + "/completions",
    data=body,
    headers={"Content-Type": "application/json", "Authorization": "Bearer " + sys.argv[1]},
)
try:
    with urllib.request.urlopen(request, timeout=30) as answer:
        sys.exit(0 if answer.status == 200 else 1)
except urllib.error.HTTPError as err:
    print("HTTP", err.code, err.read()[:200], file=sys.stderr)
    sys.exit(2)
"""


async def test_the_endpoint_authenticates_to_a_lane_with_the_lanes_own_key(
    tmp_path: Path,
) -> None:
    """A lane that requires its own key (vLLM's ``VLLM_API_KEY``) answers the endpoint,
    which sends that key, never the client's: the worker's request through it succeeds."""
    units = UnitDir(tmp_path / "units")
    (units.path / "ask.py").write_text(ASK_PY)
    fake = ["ddsup", "fake-vllm", "--port", "{port}", "--model", "{model}"]
    lane = {"model": "m", "gpus": 1, "replicas": 1, "port": "auto", "stagger": "0s"}
    units.add(
        "lane@",
        "lane",
        fake,
        ready={"http": "http://{host}:{port}/health", "interval": "50ms"},
        lane={**lane, "api_key_env": "VLLM_API_KEY"},
    )
    with socket.socket() as sock:  # a free port for the endpoint
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    endpoint = {"api_key_env": "CLIENT_KEY", "port": port}
    units.add("endpoint", "endpoint", ["ddsup", "endpoint"], endpoint=endpoint)
    units.add("worker", "worker", [PY, units.script("ask.py"), CLIENT_KEY])
    run = await run_start(
        units,
        tmp_path / "state",
        *simulated(1, 1),
        env={"CLIENT_KEY": CLIENT_KEY, "VLLM_API_KEY": LANE_KEY},
    )
    assert run.returncode == 0, run.describe()
    logs = "".join(p.read_text() for p in (tmp_path / "state" / "logs").glob("*.log*"))
    assert LANE_KEY not in logs and CLIENT_KEY not in logs
