"""``ddsup submit`` before anything reaches Slurm: the script it renders, what it refuses.

Run as a user runs it (a subprocess, their own config directory). The rendered batch
script of a 4 × 8 vLLM job in a container is held to a golden file: the profile gives
the cluster's part (account, partition, container mounts, where state goes), the unit
directory's ``job.toml`` the job's (shape, time, signal, image). ``--dry-run`` submits
nothing: there is no ``sbatch`` on the PATH these tests give it.
"""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import ddsup

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "units" / "examples"
GOLDEN = Path(__file__).with_name("golden") / "vllm-4x8-container.sh"
PROFILE = """\
# the cluster's part: ~/.config/ddsup/profiles/cluster-a.toml
[job]
account = "llm-inference"
partition = "gpu"
state_root = "/shared/runs"
python = "/shared/venvs/ddsup/bin/python"
srun_args = ["--container-mounts=/shared:/shared,/models:/models"]
sbatch_args = ["--exclusive", "--mem=0"]
environment = { HF_HOME = "/shared/hf-cache" }
"""
JOB = """\
[job]
profile = "cluster-a"
nodes = 4
gpus_per_node = 8
time = "12h"
signal = "SIGUSR1"
signal_before_end = "5m"
requeue = true
job_name = "llama-batch"
srun_args = ["--container-image=/images/vllm-0.34.sqsh"]
setup = ["module load cuda/12.4"]
"""


def _submit(home: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.path.dirname(sys.executable) + ":/usr/bin:/bin",  # no Slurm here
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
    }
    return subprocess.run(
        [sys.executable, "-m", "ddsup", "submit", *args],
        env=env,
        cwd=cwd or home,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _units(where: Path, example: str = "vllm-llama-8b", job: str = JOB) -> Path:
    shutil.copytree(EXAMPLES / example, where)
    (where / "job.toml").write_text(job)
    return where


@pytest.fixture
def home(tmp_path: Path) -> Path:
    profiles = tmp_path / "home" / ".config" / "ddsup" / "profiles"
    profiles.mkdir(parents=True)
    (profiles / "cluster-a.toml").write_text(PROFILE)
    return tmp_path / "home"


def test_the_4x8_container_job_renders_the_golden_script(home: Path, tmp_path: Path) -> None:
    units = _units(tmp_path / "jobs" / "llama" / "units")
    done = _submit(home, str(units), "--dry-run")
    assert done.returncode == 0, done.stderr
    script = done.stdout
    for actual, placeholder in (
        (str(tmp_path), ""),
        (f"ddsup {ddsup.__version__} and Python {platform.python_version()}", "ddsup @VERSIONS@"),
        (f"DDSUP_SUBMIT_VERSION={ddsup.__version__}", "DDSUP_SUBMIT_VERSION=@DDSUP@"),
        (f"DDSUP_SUBMIT_PYTHON={platform.python_version()}", "DDSUP_SUBMIT_PYTHON=@PYTHON@"),
        (socket.gethostname(), "@HOST@"),
    ):
        script = script.replace(actual, placeholder)
    if os.environ.get("DDSUP_WRITE_GOLDEN"):  # regenerate: review the diff before committing
        GOLDEN.write_text(script)
    assert script == GOLDEN.read_text()
    assert done.stderr.splitlines()[-2:] == [
        "ddsup: would submit: sbatch --parsable SCRIPT",
        "ddsup: 4 nodes × 8 GPUs, 12:00:00: 32 lanes of llama-8b (dry run: nothing submitted)",
    ]
    assert not list(home.glob(".local/state/ddsup/jobs/*")), "a dry run records nothing"


def test_the_rendered_script_is_a_valid_bash_script(home: Path, tmp_path: Path) -> None:
    units = _units(tmp_path / "units")
    done = _submit(home, str(units), "--dry-run")
    checked = subprocess.run(["bash", "-n"], input=done.stdout, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr


@pytest.mark.parametrize(
    ("args", "job", "status", "message"),
    [
        ([], "[job]\n", 64, "say how big the job is: --nodes and --gpus-per-node (or nodes "
         "and gpus_per_node in {units}/job.toml or a profile; `ddsup plan` shows what fits)"),
        (["--nodes", "1", "--gpus-per-node", "2"], "[job]\n", 69,
         "of 4 GPUs, but only 0 fit: the allocation has 1 node x 2 GPUs"),
        (["--profile", "cluster-b"], "[job]\n", 64,
         "no profile 'cluster-b': {home}/.config/ddsup/profiles/cluster-b.toml does not exist "
         "(profiles there: cluster-a)"),
        (["--time", "soon"], "[job]\n", 64, "invalid time limit 'soon'"),
        (["--", "hold"], "[job]\nnodes = 2\ngpus_per_node = 8\n", 64,
         "'hold': sbatch options go after --, e.g. ddsup submit DIR -- --hold"),
        ([], '[job]\nnodes = 2\ngpus_per_node = 8\nmin_free_space = "500T"\n', 69,
         "preflight failed: {host} (ddsup submit): … free for logs in {home} (the job asks "
         "for 500T): free some space there, or submit with a state_root on a larger file "
         "system"),
        ([], '[job]\nnodes = "2"\n', 65, "{units}/job.toml:2:9: error: [job] nodes: expected "
         "an integer, got string; write 2 without quotes"),
    ],
)  # fmt: skip
def test_what_cannot_run_is_refused_before_slurm_hears_of_it(
    home: Path, tmp_path: Path, args: list[str], job: str, status: int, message: str
) -> None:
    units = _units(tmp_path / "units", "vllm-tp-70b", job)
    done = _submit(home, str(units), *args)
    expected = message.format(units=units, home=home, host=socket.gethostname())
    assert (done.returncode, done.stdout) == (status, ""), done.stderr
    assert all(part in done.stderr for part in expected.split(" … ")), done.stderr
    assert "Traceback" not in done.stderr
    assert not (home / ".local").exists() and not (tmp_path / "units" / "job.sh").exists()


def test_a_bad_unit_file_is_reported_as_verify_reports_it(home: Path, tmp_path: Path) -> None:
    units = _units(tmp_path / "units", job="[job]\nnodes = 4\ngpus_per_node = 8\n")
    (units / "worker.toml").write_text('[unit]\ntype = "worker"\n[service]\nexec = "x"\n')
    done = _submit(home, str(units), "--dry-run")
    assert done.returncode == 65
    assert (
        f"{units}/worker.toml:4:8: error: [service] exec: exec must be an argument vector"
        in done.stderr
    )


def test_flags_win_over_job_toml_and_the_profile(home: Path, tmp_path: Path) -> None:
    units = _units(tmp_path / "units")
    done = _submit(
        home, str(units), "--dry-run", "--nodes", "2", "--time", "90m", "--job-name", "short"
    )
    assert done.returncode == 0, done.stderr
    directives = [line for line in done.stdout.splitlines() if line.startswith("#SBATCH")]
    assert "#SBATCH --nodes=2" in directives and "#SBATCH --time=01:30:00" in directives
    assert "#SBATCH --job-name=short" in directives
    assert "#SBATCH --output=/shared/runs/short/slurm-%j.out" in directives
    assert "16 lanes of llama-8b" in done.stderr
