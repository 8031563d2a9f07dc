"""``ddsup status`` of a live run says what each waiting instance waits for, and until when.

Two lanes on one node, the second 30 s after the first (its stagger turn); the first is
never ready, so the endpoint waits for its ``min_ready`` and the worker for the endpoint.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from support.ports import free_port
from support.runs import PY, running
from support.unit_dirs import UnitDir

STAGGER = 30.0


def _units(path: Path) -> UnitDir:
    units = UnitDir(path)
    units.add(
        "lane@",
        "lane",
        [PY, "-c", "import time; time.sleep(300)"],  # never ready: its probe never passes
        ready={"tcp": "{host}:{port}", "interval": "100ms"},
        lane={"model": "m", "gpus": 1, "replicas": 2, "port": "auto", "stagger": "30s"},
    )
    units.add("worker", "worker", [PY, "-c", "pass"])
    (path / "endpoint.toml").write_text(
        f'[unit]\ntype = "endpoint"\n[endpoint]\nport = {free_port()}\n'
    )
    return units


async def _status(state: Path, *args: str) -> str:
    argv = [sys.executable, "-m", "ddsup", "status", "--state-dir", str(state), *args]
    with trio.fail_after(30):
        done = await trio.run_process(argv, capture_stdout=True, capture_stderr=True)
    return done.stdout.decode()


async def test_waiting_instances_say_for_what_and_until_when(tmp_path: Path) -> None:
    state = tmp_path / "state"
    units = _units(tmp_path / "units")
    async with running(units, state, "--nodes", "1", "--gpus-per-node", "2") as run:
        events = await run.wait_for(
            lambda es: any(e.get("instance") == "lane@1" and e.get("to") == "waiting" for e in es)
        )
        [waiting] = [
            e for e in events if e.get("instance") == "lane@1" and e.get("to") == "waiting"
        ]
        data = json.loads(await _status(state, "--json"))
        text = await _status(state)

    rows: dict[str, Any] = {row["instance"]: row for row in data["instances"]}
    # both are rounded to the millisecond on their own, so they may differ by one
    assert waiting["until"] == pytest.approx(waiting["time"] + STAGGER, abs=0.0015)
    assert rows["lane@1"]["state"] == "waiting" and rows["lane@1"]["until"] == waiting["until"]
    assert rows["endpoint"]["state"] == "waiting"
    assert rows["endpoint"]["reason"] == "for min_ready: m 0 of 2 lanes ready"
    assert rows["worker"]["state"] == "waiting"
    assert rows["worker"]["reason"] == "after endpoint (not ready yet)"
    assert rows["lane@0"]["until"] is None
    clock = time.strftime("%H:%M:%S", time.localtime(waiting["until"]))
    lines = text.splitlines()
    assert "waiting: endpoint for min_ready: m 0 of 2 lanes ready" in lines, text
    assert "waiting: worker after endpoint (not ready yet)" in lines, text
    [turn] = [line for line in lines if line.startswith("waiting: lane@1 for its stagger turn")]
    assert turn.endswith(f"(until {clock})"), turn
