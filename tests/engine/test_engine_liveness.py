"""Liveness: a ready lane that stops answering leaves the rotation, then is restarted.

Real runs: two ``ddsup fake-vllm`` lanes behind the built-in endpoint, one of them
frozen with SIGSTOP (its port stays open: connections are accepted, answers never come,
as with a stuck CUDA kernel). Everything is asserted on the run's events: the liveness
failures, the ``unresponsive`` transition, the restart, and the requests that went
through the endpoint meanwhile.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from support.ports import free_port
from support.runs import running
from support.unit_dirs import UnitDir

pytestmark = pytest.mark.slow  # node agents and fake-vllm lanes: several seconds each


def _units(path: Path, port: int, failures: int) -> UnitDir:
    units = UnitDir(path)
    units.add(
        "lane@",
        "lane",
        ["ddsup", "fake-vllm", "--port", "{port}", "--model", "{model}", "--lane-id", "{instance}"],
        service={"restart": "on-failure", "restart_sec": "100ms", "timeout_stop": "5s"},
        ready={
            "http": "http://{host}:{port}/health",
            "interval": "100ms",
            "liveness_interval": "1s",
            "liveness_failures": failures,
        },
        lane={"model": "m", "gpus": 1, "replicas": 2, "port": "auto", "stagger": "0s"},
    )
    units.add(
        "endpoint",
        "endpoint",
        ["ddsup", "endpoint"],
        service={"timeout_stop": "5s"},
        # by load: the client asks one prompt again and again, which routing by prefix
        # keeps on one lane, and these tests are about lanes leaving the rotation
        endpoint={"port": port, "retries": 1, "routing": "least-load"},
    )
    return units


def _pid(events: list[dict[str, Any]], instance: str) -> int:
    return int(
        next(e["pid"] for e in events if e["event"] == "process" and e["instance"] == instance)
    )


def _of(events: list[dict[str, Any]], instance: str) -> list[dict[str, Any]]:
    """The lane's liveness events and transitions, in order."""
    return [
        e for e in events if e.get("instance") == instance and e["event"] in ("unit", "liveness")
    ]


async def _ask(url: str, count: int) -> list[tuple[str, float]]:
    """``count`` completions through the endpoint: which lane answered each, and when."""
    answers = []
    async with httpx.AsyncClient(timeout=30) as client:
        for _ in range(count):
            body = {"model": "m", "prompt": "hi", "max_tokens": 2}
            answer = await client.post(f"{url}/v1/completions", json=body)
            answer.raise_for_status()
            answers.append((answer.headers["x-fake-vllm-lane"], trio.current_time()))
    return answers


async def test_a_frozen_lane_leaves_the_rotation_and_is_restarted(tmp_path: Path) -> None:
    port = free_port()
    units = _units(tmp_path / "units", port, failures=3)
    args = ("--nodes", "1", "--gpus-per-node", "2")
    async with running(units, tmp_path / "state", *args) as run:
        events = await run.wait_ready("lane@0", "lane@1", "endpoint", limit=60)
        frozen = _pid(events, "lane@0")
        os.kill(frozen, signal.SIGSTOP)
        try:
            events = await run.wait_for(
                lambda es: any(e.get("to") == "unresponsive" for e in es), limit=30
            )
            out_at = trio.current_time()
            answers = await _ask(f"http://127.0.0.1:{port}", 8)
            events = await run.wait_for(
                lambda es: [e.get("to") for e in _of(es, "lane@0")].count("ready") == 2, limit=30
            )
        finally:
            with contextlib.suppress(ProcessLookupError):  # gone once it was killed
                os.kill(frozen, signal.SIGCONT)
    lane = _of(events, "lane@0")
    kinds = [e["to"] if e["event"] == "unit" else f"liveness {e['failures']}" for e in lane]
    first_ready = kinds.index("ready")
    assert kinds[first_ready:] == [
        "ready",
        "liveness 1",
        "unresponsive",
        "liveness 2",
        "liveness 3",
        "restarting",
        "starting",
        "ready",
    ], kinds
    liveness = [e for e in lane if e["event"] == "liveness"]
    assert {(e["limit"], e["probe"]) for e in liveness} == {(3, "no answer within 1s")}
    restarting = next(e for e in lane if e.get("to") == "restarting")
    assert "3 liveness probes failed in a row" in restarting["reason"], restarting
    killed = [e for e in events if e["event"] == "exit" and e["instance"] == "lane@0"]
    assert [e["exit"] for e in killed] == [{"signal": "SIGKILL"}]
    # out of the rotation at once: every request sent while it was unresponsive went to
    # the other lane and was answered before the frozen one was killed
    restarted_at = trio.current_time()  # an upper bound for the restart, by our clock
    assert {lane for lane, _ in answers} == {"lane@1"}, answers
    assert all(out_at <= at <= restarted_at for _, at in answers)
    assert [e.get("to") for e in _of(events, "lane@1")].count("ready") == 1


async def test_a_lane_that_answers_again_returns_to_the_rotation(tmp_path: Path) -> None:
    port = free_port()
    units = _units(tmp_path / "units", port, failures=5)
    args = ("--nodes", "1", "--gpus-per-node", "2")
    async with running(units, tmp_path / "state", *args) as run:
        events = await run.wait_ready("lane@0", "lane@1", "endpoint", limit=60)
        frozen = _pid(events, "lane@0")
        os.kill(frozen, signal.SIGSTOP)
        try:
            await run.wait_for(lambda es: any(e.get("to") == "unresponsive" for e in es), limit=30)
        finally:
            os.kill(frozen, signal.SIGCONT)
        events = await run.wait_for(
            lambda es: [e.get("to") for e in _of(es, "lane@0")].count("ready") == 2, limit=30
        )
        answers = await _ask(f"http://127.0.0.1:{port}", 6)
    lane = [e for e in _of(events, "lane@0") if e["event"] == "unit"]
    assert [e["to"] for e in lane][-2:] == ["unresponsive", "ready"], lane
    assert lane[-1]["reason"] == "liveness probe passed again"
    assert not [e for e in lane if e["to"] == "restarting"]
    assert _pid(events, "lane@0") == frozen  # the same process, never killed
    assert {name for name, _ in answers} == {"lane@0", "lane@1"}, answers
