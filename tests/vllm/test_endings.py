"""The end of a run of real vLLM lanes, while they load and while they serve.

Each test starts the vllm-llama-8b example's two lanes on the tiny model and ends the
run one way, at one moment:

- *loading*: the first lane's ``VLLM::EngineCore`` runs, so its API server waits for the
  engine (the phase in which vLLM's API server ignores SIGTERM);
- *serving*: both lanes and the endpoint are ready.

What a user relies on: ``ddsup start`` exits with the documented status (143 after
SIGTERM, 70 when its node agent is lost) and a ``result.json`` that says so; nothing it
started is left (the orphan oracle counts every process of the run's PID namespace,
whatever its tag, title or session), at once after a clean end, within the promised
10 s after SIGKILL of ``ddsup start``; and a stop while lanes load takes at most 5 s.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from support.vllm import VllmInstall

from .job import VllmJob

LANES = ("lane@0", "lane@1")
KILLED_GRACE = 10.0  # seconds: after SIGKILL of ddsup start, its sentinel ends the rest
LOADING_STOP = 5.0  # seconds from SIGTERM to the exit of a run whose lanes load

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def _reach(job: VllmJob, phase: str) -> None:
    if phase == "loading":
        job.wait_engine("lane@0")
    else:
        job.wait_ready(*LANES, "endpoint")


def test_sigterm_while_loading_stops_within_bound(
    real_vllm: VllmInstall, tmp_path: Path, figures: list[str]
) -> None:
    with VllmJob(real_vllm, tmp_path) as job:
        _reach(job, "loading")
        sent = job.signal_start(signal.SIGTERM)
        exited = job.wait_exit(limit=120.0)
        report = job.verdict()
    took = exited - sent
    assert report.returncode == 128 + signal.SIGTERM, job.said()
    assert job.result()["status"] == "stopped", job.result()
    assert report.leftovers == {}, f"left: {report.leftovers}"
    assert took <= LOADING_STOP, f"a run whose lanes load took {took:.1f}s to stop:\n{job.said()}"
    figures.append(
        f"SIGTERM of ddsup start while loading: exit 143 after {took:.1f}s "
        f"(bound {LOADING_STOP:g}s), processes left 0"
    )


@pytest.mark.parametrize("phase", ["loading", "serving"])
def test_sigkill_of_start_leaves_nothing(
    real_vllm: VllmInstall, tmp_path: Path, figures: list[str], phase: str
) -> None:
    with VllmJob(real_vllm, tmp_path, grace=KILLED_GRACE) as job:
        _reach(job, phase)
        alive = len(job.live_processes())
        job.signal_start(signal.SIGKILL)
        job.wait_exit(limit=30.0)
        report = job.verdict()
    assert report.returncode == -signal.SIGKILL
    assert report.leftovers == {}, (
        f"left {KILLED_GRACE:g}s after SIGKILL of ddsup start: {report.leftovers}"
    )
    figures.append(
        f"SIGKILL of ddsup start while {phase}: {alive} processes in the run, none left "
        f"{report.empty_after:.2f}s after (bound {KILLED_GRACE:g}s)"
    )


@pytest.mark.parametrize("phase", ["loading", "serving"])
def test_sigkill_of_the_agent_ends_the_run_70(
    real_vllm: VllmInstall, tmp_path: Path, figures: list[str], phase: str
) -> None:
    with VllmJob(real_vllm, tmp_path) as job:
        _reach(job, phase)
        sent = time.monotonic()
        job.agent_process("node0").kill()
        exited = job.wait_exit(limit=120.0)
        report = job.verdict()
    result = job.result()
    assert report.returncode == 70, f"exit {report.returncode}:\n{job.said()}"
    assert result["status"] == "unit_failed", result
    assert report.leftovers == {}, f"left: {report.leftovers}"
    figures.append(
        f"SIGKILL of the node agent while {phase}: exit 70 ({result['cause']['reason']}) after "
        f"{exited - sent:.1f}s, processes left 0"
    )
