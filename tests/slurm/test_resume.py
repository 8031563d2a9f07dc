"""A job goes on where it stopped: requeued, or submitted again, it sends what is left.

Each test runs the shipped batch script, ``packaging/sbatch-template.sh``, edited the way
docs/quickstart.md §4 tells a newcomer to (its ``EDIT`` lines: nodes, GPUs, time, the
paths), around the rehearsal's units (lanes slowed down so that a stop finds prompts
still to do). The job is cut short once part of its prompts have a result: by ``ddsup
stop`` and the same script submitted again (what §4 says to do), or by ``scontrol
requeue``. The next attempt must finish the prompts without a result, and only those:
every prompt ends with exactly one line in ``results.jsonl``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from support.ports import free_port

from .cluster import SlurmCluster, wait_until
from .jobs import describe, release_when_requeued, run_processes

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "packaging" / "sbatch-template.sh"
REHEARSAL = REPO / "units" / "examples" / "rehearsal"
PROMPTS = 96
JOB_NAME = "llama-batch"  # the template's: it names the state directory


@dataclass(frozen=True)
class TemplateJob:
    """The template's job, its units and state where a newcomer's shared paths would be."""

    root: Path

    @property
    def units(self) -> Path:
        return self.root / "units"

    @property
    def state(self) -> Path:
        return self.root / "runs" / JOB_NAME

    def script(self) -> str:
        """The template with its EDIT lines edited for the test cluster and these paths."""
        edits = {
            "#SBATCH --gpus-per-node=8": "#SBATCH --gpus-per-node=2",
            "#SBATCH --time=12:00:00": "#SBATCH --time=10",
            "DDSUP_ENV=/shared/software/ddsup": f"DDSUP_ENV={sys.prefix}",
            "UNITS=/shared/jobs/llama/units": f"UNITS={self.units}",
            "STATE_ROOT=/shared/jobs/llama/runs": f"STATE_ROOT={self.root / 'runs'}",
        }
        text = TEMPLATE.read_text(encoding="utf-8")
        assert f"#SBATCH --job-name={JOB_NAME} " in text
        for line, edited in edits.items():
            assert line in text, f"the template has no line {line!r} to edit"
            text = text.replace(line, edited, 1)
        return text

    def write_units(self) -> None:
        """The rehearsal's units, its lanes answering slowly (a stop finds work left)."""
        self.units.mkdir(parents=True)
        for name in ("generate.py", "prompts.jsonl", "endpoint.toml"):
            shutil.copy(REHEARSAL / name, self.units / name)
        endpoint = (self.units / "endpoint.toml").read_text()
        (self.units / "endpoint.toml").write_text(
            endpoint.replace("port = 9000", f"port = {free_port()}")
        )
        lane = (
            (REHEARSAL / "lane@.toml")
            .read_text()
            .replace('"--model", "{model}"]', '"--model", "{model}", "--tokens-per-second", "8"]')
        )
        worker = (
            (REHEARSAL / "worker.toml")
            .read_text()
            .replace(
                '"{unit_dir}/generate.py"', f'"{{unit_dir}}/generate.py", "--limit", "{PROMPTS}"'
            )
        )
        (self.units / "lane@.toml").write_text(lane)
        (self.units / "worker.toml").write_text(worker)

    def results(self) -> list[dict[str, Any]]:
        path = self.state / "results.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]

    def attempt(self, n: int | None = None) -> Path:
        """The record of attempt ``n`` (kept in attempts/), or of the newest."""
        return self.state if n is None else self.state / "attempts" / str(n)

    def worker_said(self, n: int | None = None) -> str:
        return (self.attempt(n) / "logs" / "worker.log").read_text()


@pytest.fixture
def template_job(slurm_cluster: SlurmCluster, tmp_path: Path) -> TemplateJob:
    if slurm_cluster.gpus_per_node < 2:
        pytest.skip("the template asks Slurm for GPUs: the test cluster has none (not root)")
    if not (Path(sys.prefix) / "bin" / "activate").exists():
        pytest.skip(f"the template sources a virtual environment's activate: {sys.prefix}")
    job = TemplateJob(tmp_path)
    job.write_units()
    return job


def _some_done(job: TemplateJob) -> None:
    wait_until(
        lambda: len(job.results()) >= PROMPTS // 4,
        90,
        lambda: f"the worker never got going: {len(job.results())} results",
    )


def _assert_each_prompt_answered_once(job: TemplateJob) -> None:
    results = job.results()
    ids = [r["id"] for r in results]
    assert not [r for r in results if r.get("error")], results
    assert len(ids) == len(set(ids)) == PROMPTS, (len(ids), len(set(ids)))


def _invocation(record: Path) -> str:
    return str(json.loads((record / "run.json").read_text())["invocation_id"])


def _assert_nothing_left(job: TemplateJob) -> None:
    for record in (job.attempt(0), job.attempt()):
        pids = run_processes(_invocation(record))
        assert not pids, describe(pids)


def test_a_stopped_job_submitted_again_sends_only_what_is_left(
    slurm_cluster: SlurmCluster, template_job: TemplateJob
) -> None:
    job = template_job
    script = job.script()
    first = slurm_cluster.sbatch(script)
    _some_done(job)
    stop = [sys.executable, "-m", "ddsup", "stop", "--state-dir", str(job.state)]
    subprocess.run(stop, check=True, capture_output=True, timeout=60)  # quickstart §4
    ended = slurm_cluster.wait_job(first, timeout=60)
    done_first = len(job.results())
    second = slurm_cluster.sbatch(script)  # the same script, as §4 says: it resumes
    result = slurm_cluster.wait_job(second, timeout=180)

    output = slurm_cluster.job_output(second)
    assert (ended.state, ended.exit_code) == ("FAILED", 143), slurm_cluster.job_output(first)
    assert (result.state, result.exit_code) == ("COMPLETED", 0), output
    assert 0 < done_first < PROMPTS
    _assert_each_prompt_answered_once(job)
    said = job.worker_said()
    assert f"{done_first}/{PROMPTS} already in {job.state}/results.jsonl; sending" in said, said
    assert f"0/{PROMPTS} already in" in job.worker_said(0)
    first_result = json.loads((job.attempt(0) / "result.json").read_text())
    assert first_result["status"] == "stopped", first_result
    assert json.loads((job.state / "run.json").read_text())["attempt"] == 1
    _assert_nothing_left(job)


def test_a_requeued_job_sends_only_what_is_left(
    slurm_cluster: SlurmCluster, template_job: TemplateJob
) -> None:
    job = template_job
    job_id = slurm_cluster.sbatch(job.script())
    _some_done(job)
    slurm_cluster.run(["scontrol", "requeue", job_id])
    release_when_requeued(slurm_cluster, job_id)
    result = slurm_cluster.wait_job(job_id, timeout=180)

    assert (result.state, result.exit_code) == ("COMPLETED", 0), slurm_cluster.job_output(job_id)
    assert result.fields["Restarts"] == "1"
    _assert_each_prompt_answered_once(job)
    first_said, said = job.worker_said(0), job.worker_said()
    assert f"0/{PROMPTS} already in" in first_said, first_said
    resumed = [line for line in said.splitlines() if f"/{PROMPTS} already in" in line]
    assert resumed and not resumed[0].startswith(f"0/{PROMPTS}"), said
    assert json.loads((job.state / "run.json").read_text())["attempt"] == 1
    _assert_nothing_left(job)
