"""A job goes on where it stopped: requeued, or submitted again, it sends what is left.

Each test runs a shipped batch script edited the way docs/quickstart.md §4 tells a
newcomer to (its ``EDIT`` lines: nodes, GPUs, time, the paths), around units whose lanes
are the stand-in, slowed down so that a stop finds prompts still to do.

``packaging/sbatch-template.sh`` with the rehearsal's units is cut short once part of
its prompts have a result: by ``ddsup stop`` and the same script submitted again (what
§4 says to do), or by ``scontrol requeue``. ``packaging/sbatch-long-job.sh`` with
``units/examples/long-job`` runs into its (two-minute) time limit and requeues itself.
Either way the next attempt must finish the prompts without a result, and only those:
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
LONG_JOB = REPO / "packaging" / "sbatch-long-job.sh"
REHEARSAL = REPO / "units" / "examples" / "rehearsal"
LONG_JOB_UNITS = REPO / "units" / "examples" / "long-job"
PROMPTS = 96
JOB_NAME = "llama-batch"  # the template's: it names the state directory
TEN_MINUTES = {"#SBATCH --time=12:00:00": "#SBATCH --time=10"}  # the template's limit


@dataclass(frozen=True)
class TemplateJob:
    """A shipped job script's job, its units and state where a newcomer's shared paths
    would be."""

    root: Path
    template: Path = TEMPLATE
    name: str = JOB_NAME

    @property
    def units(self) -> Path:
        return self.root / "units"

    @property
    def state(self) -> Path:
        return self.root / "runs" / self.name

    def script(self, **more: str) -> str:
        """The script with its EDIT lines (and ``more`` lines) edited for the test
        cluster and these paths."""
        edits = {
            "#SBATCH --gpus-per-node=8": "#SBATCH --gpus-per-node=2",
            "DDSUP_ENV=/shared/software/ddsup": f"DDSUP_ENV={sys.prefix}",
            "UNITS=/shared/jobs/llama/units": f"UNITS={self.units}",
            "STATE_ROOT=/shared/jobs/llama/runs": f"STATE_ROOT={self.root / 'runs'}",
            **more,
        }
        text = self.template.read_text(encoding="utf-8")
        assert f"#SBATCH --job-name={self.name} " in text
        return _edited(text, edits)

    def write_units(self) -> None:
        """The rehearsal's units, its lanes answering slowly (a stop finds work left)."""
        self.units.mkdir(parents=True)
        for name in ("generate.py", "prompts.jsonl"):
            shutil.copy(REHEARSAL / name, self.units / name)
        self._write_endpoint(REHEARSAL / "endpoint.toml")
        worker = _edited(
            (REHEARSAL / "worker.toml").read_text(),
            {'"{unit_dir}/generate.py"': f'"{{unit_dir}}/generate.py", "--limit", "{PROMPTS}"'},
        )
        (self.units / "lane@.toml").write_text(_slow_lane("fake-llama"))
        (self.units / "worker.toml").write_text(worker)

    def write_long_job_units(self, prompts: int, stop_before_end: str) -> None:
        """units/examples/long-job, its vLLM lanes the stand-in (no GPUs here), its
        worker's rate and stop_before_end fit for a two-minute time limit."""
        self.units.mkdir(parents=True)
        shutil.copytree(REHEARSAL, self.root / "rehearsal")  # the worker's {unit_dir}/../
        self._write_endpoint(LONG_JOB_UNITS / "endpoint.toml")
        worker = _edited(
            (LONG_JOB_UNITS / "worker.toml").read_text(),
            {
                'stop_before_end = "10m"': f'stop_before_end = "{stop_before_end}"',
                '"--max-tokens", "256"': '"--max-tokens", "16", "--concurrency", "4", '
                f'"--limit", "{prompts}"',
            },
        )
        (self.units / "worker.toml").write_text(worker)
        (self.units / "lane@.toml").write_text(_slow_lane("llama-8b"))

    def _write_endpoint(self, source: Path) -> None:
        endpoint = _edited(source.read_text(), {"port = 9000": f"port = {free_port()}"})
        (self.units / "endpoint.toml").write_text(endpoint)

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


def _edited(text: str, edits: dict[str, str]) -> str:
    for line, edited in edits.items():
        assert line in text, f"no {line!r} to edit in {text[:200]}…"
        text = text.replace(line, edited, 1)
    return text


def _slow_lane(model: str) -> str:
    """The rehearsal's lane serving ``model``: 2 s an answer of 16 tokens."""
    return _edited(
        (REHEARSAL / "lane@.toml").read_text(),
        {
            '"--model", "{model}"]': '"--model", "{model}", "--tokens-per-second", "8"]',
            'model = "fake-llama"': f'model = "{model}"',
        },
    )


@pytest.fixture
def template_job(slurm_cluster: SlurmCluster, tmp_path: Path) -> TemplateJob:
    if slurm_cluster.gpus_per_node < 2:
        pytest.skip("the template asks Slurm for GPUs: the test cluster has none (not root)")
    if not (Path(sys.prefix) / "bin" / "activate").exists():
        pytest.skip(f"the template sources a virtual environment's activate: {sys.prefix}")
    return TemplateJob(tmp_path)


def _some_done(job: TemplateJob) -> None:
    wait_until(
        lambda: len(job.results()) >= PROMPTS // 4,
        90,
        lambda: f"the worker never got going: {len(job.results())} results",
    )


def _assert_each_prompt_answered_once(job: TemplateJob, prompts: int = PROMPTS) -> None:
    results = job.results()
    ids = [r["id"] for r in results]
    assert not [r for r in results if r.get("error")], results
    assert len(ids) == len(set(ids)) == prompts, (len(ids), len(set(ids)))


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
    job.write_units()
    script = job.script(**TEN_MINUTES)
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
    job.write_units()
    job_id = slurm_cluster.sbatch(job.script(**TEN_MINUTES))
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


@pytest.mark.slow  # two minutes: a real time limit, then the next attempt
@pytest.mark.timeout(600)
def test_the_long_job_example_checkpoints_requeues_itself_and_resumes(
    slurm_cluster: SlurmCluster, tmp_path: Path, template_job: TemplateJob
) -> None:
    """sbatch-long-job.sh at a two-minute limit: SIGUSR1 30-60 s in (``@60``), the
    worker's stop 40 s before the end, its exit 85, the requeue; the next attempt sends
    the rest (2 answers a second: the first attempt cannot do them all)."""
    prompts = 220
    job = TemplateJob(tmp_path, LONG_JOB, "llama-long")
    job.write_long_job_units(prompts, stop_before_end="40s")
    script = job.script(
        **{
            "#SBATCH --time=24:00:00": "#SBATCH --time=2",
            "#SBATCH --signal=B:USR1@900": "#SBATCH --signal=B:USR1@60",
        }
    )
    job_id = slurm_cluster.sbatch(script)
    release_when_requeued(slurm_cluster, job_id, restarts=1, timeout=180)
    result = slurm_cluster.wait_job(job_id, timeout=180)

    output = slurm_cluster.job_output(job_id)
    assert (result.state, result.exit_code) == ("COMPLETED", 0), output
    assert result.fields["Restarts"] == "1", output
    _assert_each_prompt_answered_once(job, prompts)
    first = json.loads((job.attempt(0) / "result.json").read_text())
    assert (first["status"], first["exit_code"]) == ("requeued", 85), first
    lines = (job.attempt(0) / "events.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in lines]
    [usr1] = [e["time"] for e in events if e.get("reason") == "forwarding SIGUSR1"]
    [stop] = [e for e in events if e.get("instance") == "worker" and e.get("to") == "stopping"]
    assert stop["reason"].startswith("stop_before_end = 40s: the job ends at"), stop
    assert usr1 < stop["time"]
    first_said = job.worker_said(0)
    assert "checkpoint: " in first_said and "prompts left for the next attempt (exit 85)" in (
        first_said
    ), first_said
    said = job.worker_said()
    assert f"/{prompts} already in {job.state}/results.jsonl" in said, said
    assert f"finished: {prompts}/{prompts} done" in said, said
    assert json.loads((job.state / "run.json").read_text())["attempt"] == 1
    _assert_nothing_left(job)
