"""``job.toml`` and submit profiles: the ``[job]`` table, checked as unit files are.

A unit directory's ``job.toml`` is how ``ddsup submit`` asks Slurm for the job, not a
unit: ``ddsup verify DIR`` checks it with the units (each problem a
``path:line:col: error:`` line, exit 65), and every command that loads the units skips
it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from signal import Signals

import pytest

from ddsup._errors import UnitFileError
from ddsup.units import JobSettings, load_job_file, load_unit_set, parse_slurm_time
from ddsup.units._job import parse_job_bytes

ROOT = Path(__file__).resolve().parents[2]
REHEARSAL = ROOT / "units" / "examples" / "rehearsal"


def _job(text: str, *, profile: bool = False) -> JobSettings:
    settings, problems = parse_job_bytes("/jobs/x/job.toml", text.encode(), profile=profile)
    assert not problems, problems
    assert settings is not None
    return settings


def _problems(text: str, *, profile: bool = False) -> list[str]:
    settings, problems = parse_job_bytes("/jobs/x/job.toml", text.encode(), profile=profile)
    assert settings is None
    return [str(p) for p in problems]


def test_every_key_reads_as_the_batch_script_needs_it() -> None:
    settings = _job(
        "[job]\n"
        'account = "llm"\npartition = "gpu,gpu-long"\nqos = "high"\ntime = "36h"\n'
        'nodes = 4\ngpus_per_node = 8\nconstraint = "a100&ib"\nsignal = "USR1"\n'
        'signal_before_end = "5m"\nrequeue = true\njob_name = "llama-batch"\n'
        'state_root = "runs"\npython = "/shared/venv/bin/python"\nmin_free_space = "10G"\n'
        'profile = "cluster-a"\nsrun_args = ["--container-image=/i.sqsh"]\n'
        'sbatch_args = ["--exclusive"]\nsetup = ["module load cuda"]\n'
        'environment = { HF_HOME = "/shared/hf" }\n'
    )
    assert settings.time == "1-12:00:00"
    assert settings.signal is Signals.SIGUSR1 and settings.signal_before_end == 300
    assert settings.state_root == "/jobs/x/runs"  # relative: to the file's directory
    assert settings.min_free_space == 10 << 30
    assert (settings.nodes, settings.gpus_per_node, settings.requeue) == (4, 8, True)
    assert dict(settings.environment) == {"HF_HOME": "/shared/hf"}


@pytest.mark.parametrize(
    ("given", "slurm"),
    [("12h", "12:00:00"), ("90m", "01:30:00"), ("2h30m", "02:30:00"), ("720", "720"),
     ("1-12", "1-12"), ("12:00:00", "12:00:00"), ("UNLIMITED", "UNLIMITED")],
)  # fmt: skip
def test_a_time_limit_is_a_duration_or_as_slurm_writes_it(given: str, slurm: str) -> None:
    assert parse_slurm_time(given) == slurm


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ('partition = "gpu a"', "3:13: error: [job] partition: 'gpu a' holds a space"),
        ("nodes = 0", "3:9: error: [job] nodes: must be at least 1, got 0"),
        ("time = 30", """3:8: error: [job] time: write "30m" (a duration) or Slurm's"""),
        ('time = "soon"', "3:8: error: [job] time: invalid time limit 'soon'"),
        ('sbatch_args = ["exclusive"]', "3:16: error: [job] sbatch_args[0]: 'exclusive' is not an option"),
        ('setup = ["a\\nb"]', "3:10: error: [job] setup[0]: 'a\\nb' holds a control character"),
        ('job_name = "x/y"', "3:12: error: [job] job_name: 'x/y' is not a job name"),
        ('python = "bin/python"', "3:10: error: [job] python: 'bin/python' is not an absolute path"),
        ('signal_before_end = "20h"', "3:21: error: [job] signal_before_end: Slurm sends a signal"),
        ("tiem = 3", "3:1: error: unknown key 'tiem' in [job]; did you mean 'time'?"),
        ("requeue = 1", "3:11: error: [job] requeue: expected true or false, got integer"),
        ('environment = { 1A = "x" }', "3:17: error: [job] environment.1A: '1A' is not a valid"),
    ],
)  # fmt: skip
def test_each_bad_value_is_one_line_at_its_place(line: str, problem: str) -> None:
    found = _problems(
        f"[job]\nnodes = 1\n{line}\n" if "nodes" not in line else f"[job]\n\n{line}\n"
    )
    assert len(found) == 1, found
    assert found[0].startswith(f"/jobs/x/job.toml:{problem}"), found[0]


def test_a_signal_needs_its_lead_and_a_profile_names_no_profile() -> None:
    assert _problems('[job]\nsignal = "SIGUSR1"\n') == [
        "/jobs/x/job.toml:2:1: error: [job] signal needs signal_before_end too"
    ]
    assert _problems('[job]\nprofile = "a"\n', profile=True) == [
        "/jobs/x/job.toml:2:1: error: [job] profile: a profile cannot name another"
    ]


def test_a_unit_section_in_job_toml_says_the_name_is_taken() -> None:
    assert _problems('[unit]\ntype = "oneshot"\n') == [
        "/jobs/x/job.toml:1:2: error: [unit] does not belong in job.toml (how the directory "
        "is submitted): it holds [job] alone; a unit cannot be named 'job': rename it",
        "/jobs/x/job.toml:1:1: error: no [job] table: start it with [job]",
    ]


def test_later_sources_win_and_lists_add_up() -> None:
    profile = _job('[job]\naccount = "a"\ntime = "1h"\nsbatch_args = ["--exclusive"]\n')
    job = _job('[job]\ntime = "2h"\nsbatch_args = ["--mem=0"]\nenvironment = { A = "1" }\n')
    flags = JobSettings(time="00:30:00", nodes=2)
    merged = flags.over(job.over(profile))
    assert (merged.account, merged.time, merged.nodes) == ("a", "00:30:00", 2)
    assert merged.sbatch_args == ("--exclusive", "--mem=0")
    assert dict(merged.environment) == {"A": "1"}


def _verify(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ddsup", "verify", *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _rehearsal_with(tmp_path: Path, job: str) -> Path:
    units = tmp_path / "units"
    units.mkdir()
    for name in ("endpoint.toml", "lane@.toml", "worker.toml"):
        (units / name).write_text((REHEARSAL / name).read_text())
    (units / "job.toml").write_text(job)
    return units


def test_verify_checks_a_directorys_job_toml_and_loading_skips_it(tmp_path: Path) -> None:
    units = _rehearsal_with(tmp_path, "[job]\nnodes = 2\ngpus_per_node = 4\n")
    clean = _verify(units)
    (units / "job.toml").write_text('[job]\nnodes = "two"\n')
    bad = _verify(units)
    alone = _verify(units / "job.toml")

    assert clean.returncode == 0, clean.stdout
    assert clean.stderr.splitlines() == [
        f"ok: 3 units in {units}",
        f"ok: job settings in {units / 'job.toml'}",
    ]
    assert bad.returncode == alone.returncode == 65
    expected = f"{units}/job.toml:2:9: error: [job] nodes: expected an integer, got string"
    assert bad.stdout.startswith(expected) and alone.stdout.startswith(expected), bad.stdout
    assert [u.name for u in load_unit_set(units).units] == ["endpoint", "lane@", "worker"]


def test_an_unreadable_job_file_is_a_problem_not_a_traceback(tmp_path: Path) -> None:
    with pytest.raises(UnitFileError) as caught:
        load_job_file(str(tmp_path / "job.toml"))
    assert (
        str(caught.value)
        == f"{tmp_path}/job.toml:1:1: error: cannot read: no such file or directory"
    )
