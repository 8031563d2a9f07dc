"""A whole run of real vLLM lanes, as a user's job: ``ddsup start`` of the vllm-llama-8b
example's units on the tiny model, with a worker that is a plain ``openai`` client.

The lanes load, the endpoint starts once half of them are ready, the worker lists the
models, asks for a chat completion and a streamed one through the endpoint, and its exit
ends the run: exit 0, ``result.json`` ``ok``, and nothing left in the run's PID
namespace (the orphan oracle).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from support.vllm import VllmInstall

from .job import LOAD_LIMIT, VllmJob
from .job_units import model_name

WORKER = Path(__file__).with_name("openai_worker.py")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def test_a_whole_run_serves_the_openai_client(
    real_vllm: VllmInstall, tmp_path: Path, figures: list[str]
) -> None:
    found = tmp_path / "worker.json"
    worker = [sys.executable, str(WORKER), str(found)]
    with VllmJob(real_vllm, tmp_path, worker=worker) as job:
        job.wait_exit(limit=LOAD_LIMIT + 180.0)
        report = job.verdict()
    assert report.returncode == 0, f"exit {report.returncode}:\n{job.said()}"
    assert job.result()["status"] == "ok", job.result()
    assert report.leftovers == {}, f"left: {report.leftovers}"
    answers = json.loads(found.read_text())
    assert answers["models"] == [model_name()], answers
    assert answers["chat"]["tokens"] == 16 and answers["chat"]["finish_reason"] == "length"
    stream = answers["stream"]
    assert stream["finish_reason"] == "length" and stream["tokens"] == 16, stream
    assert stream["chunks"] > 2, stream  # role, pieces of text, usage: relayed as it came
    events = job.events()
    worker_start = next(e["time"] for e in events if e.get("instance") == "worker")
    worker_end = [e["time"] for e in events if e.get("instance") == "worker"][-1]
    finished = events[-1]["time"]
    figures.append(
        f"whole run: worker started {worker_start - job.started_at:.1f}s after the start, "
        f"ran {worker_end - worker_start:.1f}s; the stop (vLLM's drain) took "
        f"{finished - worker_end:.1f}s; exit 0, processes left 0"
    )
