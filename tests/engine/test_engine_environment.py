"""What units see (environment, GPUs, ports) and what the state directory holds
(permissions, no secret values, complete logs)."""

from __future__ import annotations

import json
import stat
import uuid
from pathlib import Path
from typing import Any

import pytest

from ddsup.channel._channel import ADDRESS_ENV, SECRET_ENV
from support.runs import PY, run_start, simulated
from support.unit_dirs import UnitDir


def _dumping(units: UnitDir, dumps: Path, *then: str) -> list[str]:
    return [PY, units.script("env_dump.py"), f"{dumps}/{{instance}}.json", *then]


def _ready_when_dumped(dumps: Path) -> dict[str, Any]:
    return {"exec": ["test", "-s", f"{dumps}/{{instance}}.json"], "interval": "20ms"}


@pytest.mark.slow  # node agents: a few seconds each
async def test_unit_environment_and_state_dir(tmp_path: Path) -> None:
    dumps = tmp_path / "env"
    dumps.mkdir()
    secret = f"s3cret-{uuid.uuid4().hex}"
    mark = f"inherited-{uuid.uuid4().hex}"
    units = UnitDir(tmp_path / "units")
    lane = {"model": "m", "gpus": 1, "replicas": "auto", "port": "auto", "stagger": "0s"}
    units.add(
        "lane@",
        "lane",
        _dumping(units, dumps, "sleep", "60"),
        ready=_ready_when_dumped(dumps),
        lane=lane,
    )
    units.add(
        "svc",
        "service",
        _dumping(units, dumps, "sleep", "60"),
        service={
            "environment": {"ADDED": "v-{instance}", "API_TOKEN": secret},
            "unset_environment": ["UNSET_ME"],
        },
        ready=_ready_when_dumped(dumps),
    )
    units.add("worker", "worker", _dumping(units, dumps), unit={"after": ["lane", "svc"]})
    state = tmp_path / "state"
    run = await run_start(
        units, state, *simulated(2, 2), env={"INHERITED_MARK": mark, "UNSET_ME": "x"}
    )
    assert run.returncode == 0, run.describe()

    plan = json.loads((state / "plan.json").read_text())
    invocation = json.loads((state / "run.json").read_text())["invocation_id"]
    planned = {i["instance"]: i for i in plan["instances"]}
    lanes = sorted(i for i in planned if i.startswith("lane@"))
    assert len(lanes) == 4
    seen = {name: json.loads((dumps / f"{name}.json").read_text()) for name in planned}
    for name, env in seen.items():
        assert env["INHERITED_MARK"] == mark, name
        assert env["DDSUP_INVOCATION_ID"] == invocation, name
        assert env["DDSUP_UNIT"] == name.split("@")[0], name
        assert env["DDSUP_NODE"] == planned[name]["node"], name
        assert env["DDSUP_STATE_DIR"] == str(state), name
        assert env["SPT_NOENV"] == "1", name  # setproctitle keeps the tag (no-orphans.md)
        assert SECRET_ENV not in env, name
        assert ADDRESS_ENV not in env, name
    assert seen["svc"]["ADDED"] == "v-svc"
    assert seen["svc"]["API_TOKEN"] == secret
    assert "UNSET_ME" not in seen["svc"]
    assert seen["worker"]["UNSET_ME"] == "x"
    assert "ADDED" not in seen["worker"]

    devices = set()
    for name in lanes:
        env, where = seen[name], planned[name]
        assert env["CUDA_VISIBLE_DEVICES"] == ",".join(map(str, where["gpus"]))
        assert env["DDSUP_LANE_REPLICA"] == str(where["replica"])
        assert env["DDSUP_LANE_RANK"] == "0"
        assert env["DDSUP_LANE_PORT"] == str(where["port"])
        devices.add((where["node"], env["CUDA_VISIBLE_DEVICES"]))
    assert len(devices) == 4, "two lanes share a GPU"
    assert {node for node, _ in devices} == {"node0", "node1"}
    assert len({seen[n]["DDSUP_LANE_PORT"] for n in lanes if planned[n]["node"] == "node0"}) == 2
    assert "CUDA_VISIBLE_DEVICES" not in seen["worker"]

    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    for path in state.rglob("*"):
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), f"{path}: {oct(mode)}"
        if path.is_file():
            assert secret not in path.read_text(errors="replace"), f"secret value in {path}"
    assert secret not in run.output


async def test_fast_writer_loses_nothing_in_its_log(tmp_path: Path) -> None:
    lines = 100_000  # ~5 MB
    script = (
        "import sys\n"
        "out = sys.stdout\n"
        f"for i in range({lines}):\n"
        "    out.write('%08d ' % i + 'x' * 42 + '\\n')\n"
    )
    units = UnitDir(tmp_path / "units")
    (units.path / "writer.py").write_text(script)
    units.add("worker", "worker", [PY, units.script("writer.py")])
    run = await run_start(units, tmp_path / "state")
    assert run.returncode == 0, run.describe()
    log = (tmp_path / "state" / "logs" / "worker.log").read_bytes()
    assert len(log) == lines * 52
    expected = b"".join(b"%08d " % i + b"x" * 42 + b"\n" for i in range(lines))
    assert log == expected
