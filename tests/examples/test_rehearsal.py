"""The README's first command, end to end: the rehearsal example completes and exits 0.

Real processes throughout: ``ddsup start`` with 2 simulated nodes × 2 GPUs, four
``ddsup fake-vllm`` lanes under two node agents, the endpoint fed live by the controller,
and the bundled worker sending all 300 prompts through ``OPENAI_BASE_URL``.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from support.ports import free_port
from support.runs import run_start, simulated

REHEARSAL = Path(__file__).resolve().parents[2] / "units" / "examples" / "rehearsal"
PROMPTS = sum(1 for line in (REHEARSAL / "prompts.jsonl").read_text().splitlines() if line)


@pytest.mark.slow
async def test_rehearsal_runs_end_to_end(tmp_path: Path) -> None:
    state, units = tmp_path / "state", tmp_path / "rehearsal"
    # the example as shipped, but for the endpoint's port: 9000 may be another run's
    shutil.copytree(REHEARSAL, units)
    endpoint = units / "endpoint.toml"
    text = endpoint.read_text()
    assert text.count("port = 9000") == 1, text
    endpoint.write_text(text.replace("port = 9000", f"port = {free_port()}"))
    flags = ("--launcher", "local", *simulated(2, 2))
    done = await run_start(units, state, *flags, limit=120)
    assert done.returncode == 0, done.output[-3000:]

    result = json.loads((state / "result.json").read_text())
    assert result == {
        "status": "ok",
        "exit_code": 0,
        "cause": {"unit": "worker", "reason": "exit status 0", "exit": {"code": 0}},
    }
    plan = json.loads((state / "plan.json").read_text())
    lanes = [i for i in plan["instances"] if i["type"] == "lane"]
    assert sorted((i["node"], tuple(i["gpus"])) for i in lanes) == [
        ("node0", (0,)),
        ("node0", (1,)),
        ("node1", (0,)),
        ("node1", (1,)),
    ]
    results = [json.loads(line) for line in (state / "results.jsonl").read_text().splitlines()]
    assert len(results) == PROMPTS
    assert len({r["id"] for r in results}) == PROMPTS
    assert all(r["text"] for r in results)
    # fake-vllm prefixes its text with its lane id (its port): the endpoint spread the load.
    answered_by = {re.match(r"\[(\d+)\]", r["text"]).group(1) for r in results}  # type: ignore[union-attr]
    assert answered_by == {str(i["port"]) for i in lanes}

    events = [json.loads(line) for line in (state / "events.jsonl").read_text().splitlines()]
    ready = {e["instance"]: e["time"] for e in events if e.get("to") == "ready"}
    started = {e["instance"]: e["time"] for e in events if e.get("to") == "starting"}
    assert all(ready[lane["instance"]] <= started["endpoint"] for lane in lanes)
    assert ready["endpoint"] <= started["worker"]
