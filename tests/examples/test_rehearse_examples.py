"""``ddsup start --rehearse`` runs every real vLLM example, unchanged, on simulated nodes.

Each ``units/examples/vllm-*`` directory is run as it is in the repository, with
``--rehearse`` and no other option: its lanes' ``vllm serve …`` become fake-vllm with
the same flags, GPUs are simulated (none here), and as many local nodes as its widest
lane spans are simulated. The run must go the whole way: preflight (its ``model_path``
does not exist here), lanes ready on the ports the unit files fix, the built-in endpoint,
the example's worker sending every prompt through it, exit 0.

The unit files fix their ports (8000…, the endpoint's 9000), which other runs on a shared
machine may hold: each run gets a network namespace of its own (``support.netns``), so
nothing outside can take them. Where no namespace can be made, the test runs a copy of
the example with its ports moved to a free block (``support.fixed_ports``).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from support.fixed_ports import OFFSETS, free_base, moved_copy, netns_available
from support.netns import argv_in_netns
from support.runs import PY, start_argv, start_env

EXAMPLES = Path(__file__).resolve().parents[2] / "units" / "examples"
VLLM_EXAMPLES = sorted(p for p in EXAMPLES.iterdir() if p.name.startswith("vllm-"))


def _rehearse(directory: Path, state: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    if netns_available():
        argv = argv_in_netns(start_argv(directory, state, "--rehearse", verbose=False))
    else:
        moved = moved_copy(EXAMPLES, state.parent / "examples", free_base()) / directory.name
        argv = start_argv(moved, state, "--rehearse", verbose=False)
    began = time.monotonic()
    done = subprocess.run(argv, env=start_env(), capture_output=True, text=True, timeout=240)
    return done, time.monotonic() - began


def test_every_vllm_example_is_rehearsed() -> None:
    assert [p.name for p in VLLM_EXAMPLES] == ["vllm-llama-8b", "vllm-pp-2node", "vllm-tp-70b"]


@pytest.mark.slow  # 10-25 s each: the examples' own probe intervals and worker
@pytest.mark.parametrize("directory", VLLM_EXAMPLES, ids=lambda p: p.name)
def test_rehearse_runs_the_example_unchanged(tmp_path: Path, directory: Path) -> None:
    state = tmp_path / "state"
    done, took = _rehearse(directory, state)
    print(f"{directory.name}: rehearsed in {took:.1f}s")  # the figure for the docs
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rehearsal: lane@ runs fake-vllm in place of vllm serve" in done.stderr
    result = json.loads((state / "result.json").read_text())
    assert result["status"] == "ok"
    plan = json.loads((state / "plan.json").read_text())
    lanes = [i for i in plan["instances"] if i["type"] == "lane"]
    for lane in lanes:
        log = (state / "logs" / f"{lane['instance']}.log").read_text().splitlines()
        if lane["rank"]:  # exec_follower: vllm serve … --headless
            assert "fake-vllm headless: no API server" in log, log
        else:  # vllm serve … --host 0.0.0.0 --port {port}: on the lane's own address only
            assert f"fake-vllm listening on http://127.0.0.1:{lane['port']}" in log, log
    prompts = (EXAMPLES / "rehearsal" / "prompts.jsonl").read_text().splitlines()
    results = [json.loads(line) for line in (state / "results.jsonl").read_text().splitlines()]
    assert {r["id"] for r in results if r["text"]} == {json.loads(p)["id"] for p in prompts}


@pytest.mark.parametrize(
    "directory", [*VLLM_EXAMPLES, EXAMPLES / "rehearsal"], ids=lambda p: p.name
)
def test_without_a_namespace_every_port_moves_to_a_free_block(
    tmp_path: Path, directory: Path
) -> None:
    """Where no namespace can be made, the rehearsals here and on the quickstart page run
    a moved copy: every port its plan takes (up to 4 nodes of 8 GPUs, as the page runs)
    lies in the block found free, the endpoint's too."""
    base = free_base()
    moved = moved_copy(EXAMPLES, tmp_path / "examples", base) / directory.name
    argv = [PY, "-m", "ddsup", "plan", str(moved), "--launcher", "local", "--json"]
    done = subprocess.run(
        [*argv, "--nodes", "4", "--gpus-per-node", "8"],
        env=start_env(), capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    plan = json.loads(done.stdout)
    ports = [i[key] for i in plan["instances"] for key in ("port", "master_port") if i.get(key)]
    assert plan["endpoint_url"].endswith(f":{base + 1000}")
    assert set(ports) <= {base + offset for offset in OFFSETS}, (base, ports)
