"""The example unit directories: they verify, and the vLLM ones place as their comments say.

Each vLLM example's ``lane@.toml`` documents where its lanes go on a 4-node × 8-GPU
allocation (``ddsup plan … --nodelist 'gpu[01-04]' --gpus-per-node 8``); these tests hold
the examples to that text through the real command line, and check that the argv each
rank would run is the vLLM invocation the comments describe (rank 0 serves, followers run
``--headless``), built by the same code (``NodeRunner.build_spec``) that starts them.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from ddsup.agent._node_runner import NodeRunner
from ddsup.fake_vllm._vllm_flags import VLLM_SERVE_FLAGS, VLLM_VERSION
from ddsup.plan import Plan
from ddsup.record._state_dir import StateDir
from ddsup.service._environment import RunContext
from ddsup.units import load_unit_set

EXAMPLES = Path(__file__).resolve().parents[2] / "units" / "examples"
EXAMPLE_DIRS = sorted(p for p in EXAMPLES.iterdir() if p.is_dir())
VLLM_DIRS = [p for p in EXAMPLE_DIRS if p.name.startswith("vllm-")]
# every example whose lanes run vLLM: the placement examples and the long job's
VLLM_LANE_DIRS = [*VLLM_DIRS, EXAMPLES / "long-job"]
NODES = [f"gpu0{n}" for n in range(1, 5)]

# The vLLM release whose `vllm serve` runs in the real-vLLM tier (tests/vllm checks every
# flag of the examples against its parser); the examples' headers name it and the flag
# table's release.
TIER_VLLM = "0.32.0"


def vllm_flags() -> frozenset[str]:
    """Every spelling of every `vllm serve` flag of the fake's table (VLLM_VERSION)."""
    return frozenset(name for entry in VLLM_SERVE_FLAGS for name in entry.names)


def ddsup(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ddsup", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@functools.cache
def plan_text(directory: Path) -> str:
    """``ddsup plan DIR --nodelist 'gpu[01-04]' --gpus-per-node 8 --json``, run once per DIR."""
    done = ddsup(
        "plan", str(directory), "--nodelist", "gpu[01-04]", "--gpus-per-node", "8", "--json"
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def plan_json(directory: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(plan_text(directory))
    return data


def lanes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [i for i in plan["instances"] if i["type"] == "lane"]


def client_units(plan: dict[str, Any]) -> dict[str, tuple[str, int | None]]:
    return {i["instance"]: (i["node"], i["port"]) for i in plan["instances"] if i["type"] != "lane"}


@pytest.mark.parametrize("directory", EXAMPLE_DIRS, ids=lambda p: p.name)
def test_example_directory_verifies(directory: Path) -> None:
    done = ddsup("verify", str(directory))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == ""
    assert f"ok: 3 units in {directory}" in done.stderr


def test_every_vllm_example_is_tested() -> None:
    # a new example directory must get its placement test below
    assert [p.name for p in VLLM_DIRS] == ["vllm-llama-8b", "vllm-pp-2node", "vllm-tp-70b"]


def test_llama_8b_one_lane_per_gpu() -> None:
    plan = plan_json(EXAMPLES / "vllm-llama-8b")
    placed = lanes(plan)
    assert len(placed) == 32
    for n, lane in enumerate(placed):
        assert lane["instance"] == f"lane@{n}"
        assert lane["node"] == NODES[n // 8]
        assert lane["gpus"] == [n % 8]
        assert lane["port"] == 8000 + n % 8
        assert lane["start_delay"] == 5.0 * (n % 8)
        assert (lane["replica"], lane["rank"], lane["nnodes"]) == (n, 0, 1)
        assert lane["master_addr"] is None and lane["master_port"] is None
    assert client_units(plan) == {"endpoint": ("gpu01", 9000), "worker": ("gpu01", None)}


def test_tp_70b_two_tensor_parallel_lanes_per_node() -> None:
    plan = plan_json(EXAMPLES / "vllm-tp-70b")
    placed = lanes(plan)
    assert len(placed) == 8
    for n, lane in enumerate(placed):
        first = n % 2
        assert lane["instance"] == f"lane@{n}"
        assert lane["node"] == NODES[n // 2]
        assert lane["gpus"] == list(range(4 * first, 4 * first + 4))
        assert lane["port"] == 8000 + first
        assert lane["start_delay"] == 30.0 * first
        assert (lane["rank"], lane["nnodes"]) == (0, 1)
    assert client_units(plan) == {"endpoint": ("gpu01", 9000), "worker": ("gpu01", None)}


def test_pp_2node_lanes_span_node_pairs() -> None:
    plan = plan_json(EXAMPLES / "vllm-pp-2node")
    got = [
        (
            i["instance"],
            i["node"],
            i["rank"],
            i["replica"],
            i["nnodes"],
            i["master_addr"],
            i["master_port"],
            i["port"],
        )
        for i in lanes(plan)
    ]
    assert got == [
        ("lane@0", "gpu01", 0, 0, 2, "gpu01", 9001, 8000),
        ("lane@0:1", "gpu02", 1, 0, 2, "gpu01", 9001, 8000),
        ("lane@1", "gpu03", 0, 1, 2, "gpu03", 9001, 8000),
        ("lane@1:1", "gpu04", 1, 1, 2, "gpu03", 9001, 8000),
    ]
    assert all(i["gpus"] == list(range(8)) for i in lanes(plan))
    assert client_units(plan) == {"endpoint": ("gpu01", 9000), "worker": ("gpu01", None)}


def flag(argv: tuple[str, ...], name: str) -> str:
    assert argv.count(name) == 1, f"{name} appears {argv.count(name)} times in {argv}"
    return argv[argv.index(name) + 1]


async def built_argvs(directory: Path, tmp_path: Path) -> dict[str, tuple[str, ...]]:
    """The argv of every lane instance, as a node agent would build it."""
    units = load_unit_set(directory)
    plan = Plan.from_dict(plan_json(directory))
    run = RunContext(
        invocation_id="test",
        state_dir=str(tmp_path),
        unit_dir=str(directory),
        job_id="1234",
        endpoint_url=plan.endpoint_url,
    )
    async with trio.open_nursery() as nursery:
        runner = NodeRunner(
            units=units,
            plan=plan,
            run=run,
            state=StateDir(tmp_path),
            nursery=nursery,
            emit=lambda event: None,
            base_env={},
        )
        return {
            p.instance: runner.build_spec(p).argv for p in plan.instances if p.type.value == "lane"
        }


async def test_pp_2node_ranks_run_vllm_multinode_flags(tmp_path: Path) -> None:
    argvs = await built_argvs(EXAMPLES / "vllm-pp-2node", tmp_path)
    for instance, argv in argvs.items():
        rank = 1 if ":" in instance else 0
        head = "gpu01" if instance.startswith("lane@0") else "gpu03"
        assert argv[:3] == ("vllm", "serve", "/models/llama-3.1-405b-instruct")
        assert flag(argv, "--tensor-parallel-size") == "8"
        assert flag(argv, "--pipeline-parallel-size") == "2"
        assert flag(argv, "--nnodes") == "2"
        assert flag(argv, "--node-rank") == str(rank)
        assert flag(argv, "--master-addr") == head
        assert flag(argv, "--master-port") == "9001"
        assert flag(argv, "--distributed-executor-backend") == "mp"
        if rank == 0:  # serves HTTP where the endpoint and the probe look for it
            assert "--headless" not in argv
            assert flag(argv, "--port") == "8000"
            assert flag(argv, "--served-model-name") == "llama-405b"
        else:
            assert argv[-1] == "--headless"
            assert "--port" not in argv


@pytest.mark.parametrize("directory", VLLM_LANE_DIRS, ids=lambda p: p.name)
async def test_vllm_lanes_drain_within_timeout_stop(directory: Path, tmp_path: Path) -> None:
    lane = load_unit_set(directory).lanes[0]
    for argv in (await built_argvs(directory, tmp_path)).values():
        assert argv[:2] == ("vllm", "serve")
        assert flag(argv, "--tensor-parallel-size") == str(lane.lane and lane.lane.gpus)
        used = {a.split("=", 1)[0] for a in argv if a.startswith("--")}
        unknown = used - vllm_flags()
        assert not unknown, f"not flags of vllm serve {VLLM_VERSION}: {sorted(unknown)}"
        if "--headless" not in argv:
            drain = int(flag(argv, "--shutdown-timeout"))
            # vLLM's drain must end before ddsup's SIGKILL, with room for engine teardown
            assert 0 < drain <= lane.service.timeout_stop / 2
    assert lane.service.timeout_start >= 20 * 60  # cold starts take 10-20 minutes


@pytest.mark.parametrize("directory", VLLM_LANE_DIRS, ids=lambda p: p.name)
def test_vllm_worker_runs_the_bundled_client(directory: Path) -> None:
    worker = load_unit_set(directory).worker
    assert worker is not None
    script = worker.service.exec[1].replace("{unit_dir}", str(directory))
    assert Path(script).resolve() == EXAMPLES / "rehearsal" / "generate.py"
    model = worker.service.exec[worker.service.exec.index("--model") + 1]
    assert model == load_unit_set(directory).lanes[0].lane.model  # type: ignore[union-attr]
    assert "SIGUSR1" in [s.name for s in worker.service.forward_signals]


@pytest.mark.parametrize("directory", VLLM_DIRS, ids=lambda p: p.name)
def test_vllm_comment_states_the_lane_count(directory: Path) -> None:
    # the comment a reader sees first names the number of lanes on 4 × 8 GPUs
    text = (directory / "lane@.toml").read_text(encoding="utf-8")
    said = re.search(r"^# (\d+) lanes", text, re.MULTILINE)
    assert said is not None, "lane@.toml must say '# N lanes …' for the 4 × 8 plan"
    replicas = {i["replica"] for i in lanes(plan_json(directory))}
    assert int(said.group(1)) == len(replicas)


@pytest.mark.parametrize("directory", VLLM_LANE_DIRS, ids=lambda p: p.name)
def test_vllm_header_names_the_versions_it_is_tested_with(directory: Path) -> None:
    lines = (directory / "lane@.toml").read_text(encoding="utf-8").splitlines()
    header = " ".join(line.lstrip("# ") for line in lines if line.startswith("#"))
    table = ".".join(VLLM_VERSION.split(".")[:2])
    assert f"in vLLM {TIER_VLLM} (the CPU build the real-vLLM test tier runs" in header
    assert f"and {table} (the flag table of `ddsup fake-vllm`" in header
    assert "source index" not in header  # which versions, not where flags were looked up


def test_the_long_job_stops_its_worker_after_the_job_s_usr1() -> None:
    """The worker's stop_before_end comes after the batch script's SIGUSR1 (Slurm sends
    it up to 30 s early): the worker knows the end is near when it is stopped, and asks
    for the requeue; and it has time to stop before Slurm's own signal at the limit."""
    worker = load_unit_set(EXAMPLES / "long-job").worker
    assert worker is not None and worker.stop_before_end is not None
    script = (EXAMPLES.parent.parent / "packaging" / "sbatch-long-job.sh").read_text()
    lead = re.search(r"^#SBATCH --signal=B:USR1@(\d+)$", script, re.MULTILINE)
    assert lead is not None and "#SBATCH --requeue" in script
    assert worker.stop_before_end + 60 <= int(lead.group(1))
    assert "--requeue" in worker.service.exec
    assert "SIGUSR1" in [s.name for s in worker.service.forward_signals]
