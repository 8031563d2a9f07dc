"""Lanes get the GPUs the job was given, on each node, verbatim.

Real ``ddsup start`` runs with simulated nodes (``--nodes 2``): this machine's GPUs (what
``CUDA_VISIBLE_DEVICES`` or a fake ``nvidia-smi`` on ``PATH`` says) are shared out among
the nodes, each node's agent reports its share, and the plan is made from those reports.
Every lane dumps its environment, so the tests read the ``CUDA_VISIBLE_DEVICES`` each
lane really got.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from support.fake_smi import FakeApp, FakeGpu, FakeSmi
from support.runs import PY, Run, run_start
from support.unit_dirs import UnitDir

pytestmark = pytest.mark.slow  # node agents: a few seconds each


def _units(tmp_path: Path, **lane: Any) -> tuple[UnitDir, Path]:
    """Lanes that dump their environment (ready once dumped); a worker that ends the run."""
    dumps = tmp_path / "env"
    dumps.mkdir()
    units = UnitDir(tmp_path / "units")
    units.add(
        "lane@",
        "lane",
        [PY, units.script("env_dump.py"), f"{dumps}/{{instance}}.json", "sleep", "60"],
        service={"timeout_stop": "5s"},
        ready={"exec": ["test", "-s", f"{dumps}/{{instance}}.json"], "interval": "20ms"},
        lane={"model": "m", "gpus": 1, "port": "auto", "stagger": "0s", **lane},
    )
    units.add("worker", "worker", ["true"], unit={"after": ["lane"]})
    return units, dumps


def _visible(dumps: Path) -> dict[str, str]:
    """Each lane's CUDA_VISIBLE_DEVICES, as its process saw it."""
    return {
        path.stem: json.loads(path.read_text())["CUDA_VISIBLE_DEVICES"]
        for path in sorted(dumps.glob("*.json"))
    }


def _nodes(run: Run) -> dict[str, list[str]]:
    plan = json.loads((run.state / "plan.json").read_text())
    return {n["name"]: n["devices"] for n in plan["nodes"]}


async def test_lanes_get_the_indices_the_job_was_given(tmp_path: Path) -> None:
    """CUDA_VISIBLE_DEVICES=4,5: the lanes use GPUs 4 and 5, never 0 and 1."""
    units, dumps = _units(tmp_path)
    run = await run_start(units, tmp_path / "state", env={"CUDA_VISIBLE_DEVICES": "4,5"})

    assert run.returncode == 0, run.describe()
    assert _visible(dumps) == {"lane@0": "4", "lane@1": "5"}
    assert _nodes(run) == {"node0": ["4", "5"]}


async def test_uuids_and_mig_devices_pass_through_per_node(tmp_path: Path) -> None:
    """Three GPUs over two simulated nodes: two on node0, one on node1, each verbatim."""
    units, dumps = _units(tmp_path)
    given = "GPU-8f2c1b0e-aaaa,GPU-5d5ba0d6-bbbb,MIG-c6d4f1ef-cccc"
    run = await run_start(
        units, tmp_path / "state", "--nodes", "2", env={"CUDA_VISIBLE_DEVICES": given}
    )

    assert run.returncode == 0, run.describe()
    assert _nodes(run) == {
        "node0": ["GPU-8f2c1b0e-aaaa", "GPU-5d5ba0d6-bbbb"],
        "node1": ["MIG-c6d4f1ef-cccc"],
    }
    assert _visible(dumps) == {
        "lane@0": "GPU-8f2c1b0e-aaaa",
        "lane@1": "GPU-5d5ba0d6-bbbb",
        "lane@2": "MIG-c6d4f1ef-cccc",
    }
    started = {e["instance"]: e["node"] for e in run.events() if e.get("to") == "starting"}
    assert {k: v for k, v in started.items() if k.startswith("lane")} == {
        "lane@0": "node0",
        "lane@1": "node0",
        "lane@2": "node1",
    }


async def test_a_node_with_fewer_gpus_is_named(tmp_path: Path) -> None:
    """Four lanes asked for, three GPUs: 69, and the message names the node short of them."""
    units, dumps = _units(tmp_path, replicas=4)
    run = await run_start(
        units, tmp_path / "state", "--nodes", "2", env={"CUDA_VISIBLE_DEVICES": "4,5,6"}
    )

    assert run.returncode == 69, run.describe()
    reason = run.result()["cause"]["reason"]
    assert "2 nodes with 1-2 GPUs each (node1: 1, node0: 2), 3 GPUs" in reason, reason
    assert not list(dumps.iterdir())


SMI_GPUS = [FakeGpu("GPU-a0"), FakeGpu("GPU-b1", migs=("MIG-b1-0", "MIG-b1-1")), FakeGpu("GPU-c2")]


@pytest.mark.parametrize("busy", ["fail", "warn"])
async def test_nvidia_smi_lists_the_gpus_and_who_holds_them(tmp_path: Path, busy: str) -> None:
    """Without CUDA_VISIBLE_DEVICES, nvidia-smi's GPUs (MIG devices for a split GPU) are
    shared out; a process holding GPU 2 fails preflight on node1, or is a warning."""
    units, dumps = _units(tmp_path, busy_gpus=busy)
    smi = FakeSmi(SMI_GPUS, [FakeApp(gpu=2, pid=4242, mib=20480)]).install(tmp_path / "bin")
    path = f"{smi}{os.pathsep}{os.environ['PATH']}"
    run = await run_start(units, tmp_path / "state", "--nodes", "2", env={"PATH": path})

    held = "GPU 2 of lane@3 is in use by another process: pid 4242 holds 20480 MiB"
    assert _nodes(run) == {"node0": ["0", "MIG-b1-0"], "node1": ["MIG-b1-1", "2"]}
    if busy == "fail":
        assert run.returncode == 69, run.describe()
        result = run.result()
        assert result["status"] == "preflight_failed"
        assert f"node1: {held}" in result["cause"]["reason"]
        assert not [e for e in run.events() if e.get("to") == "starting"]
        return
    assert run.returncode == 0, run.describe()
    [warning] = [e for e in run.events() if e.get("reason") == "preflight warning"]
    assert warning["node"] == "node1" and warning["warning"].startswith(held)
    assert _visible(dumps) == {
        "lane@0": "0",
        "lane@1": "MIG-b1-0",
        "lane@2": "MIG-b1-1",
        "lane@3": "2",
    }
