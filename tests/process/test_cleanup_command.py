"""``ddsup cleanup``: end every process of a run on this node, by hand, any number of times."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from process_helpers import SLEEP, alive, py, run_env

from ddsup._cli import main
from ddsup.process import spawn


def _cleanup(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ddsup", "cleanup", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def _start(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(py(SLEEP), env=env, start_new_session=True)


def test_cleanup_by_invocation_twice(invocation_id: str) -> None:
    mine = [_start(run_env(invocation_id)) for _ in range(3)]
    decoy = _start(run_env(invocation_id + "x"))
    try:
        first = _cleanup("--invocation", invocation_id)
        assert (first.returncode, first.stdout) == (
            0,
            f"ended 3 process(es) of run {invocation_id}\n",
        )
        assert [p.wait(timeout=10) for p in mine] == [-signal.SIGKILL] * 3
        assert alive(decoy.pid)  # another run's process: never touched
        second = _cleanup("--invocation", invocation_id)
        assert (second.returncode, second.stdout) == (
            0,
            f"ended 0 process(es) of run {invocation_id}\n",
        )
    finally:
        for proc in [*mine, decoy]:
            proc.kill()
            proc.wait()


def _cleanup_here(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``ddsup cleanup`` in this process (same code path, without an interpreter start)."""
    try:
        status = main(["cleanup", *args])
    except SystemExit as exited:  # argparse's usage errors
        status = int(exited.code or 0)
    out, err = capsys.readouterr()
    return status, out, err


def test_cleanup_by_state_dir(
    invocation_id: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "run.json").write_text(json.dumps({"invocation_id": invocation_id}))
    proc = _start(run_env(invocation_id))
    try:
        status, out, err = _cleanup_here(capsys, "--state-dir", str(tmp_path))
        assert (status, out) == (0, f"ended 1 process(es) of run {invocation_id}\n"), err
        assert proc.wait(timeout=10) == -signal.SIGKILL
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "run.json: no such file; is {dir} a ddsup state directory?"),
        ("{}", "run.json: no key 'invocation_id' (a string) in the run's state"),
        ('{"invocation_id": 3}', "run.json: no key 'invocation_id' (a string) in the run's state"),
        ("{not json", "run.json: cannot read the run's state"),
    ],
)
def test_cleanup_state_dir_errors_are_clear(
    tmp_path: Path, content: str | None, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    if content is not None:
        (tmp_path / "run.json").write_text(content)
    status, _, err = _cleanup_here(capsys, "--state-dir", str(tmp_path))
    assert status == 1
    assert err.startswith(f"ddsup: error: {tmp_path}/run.json: ")
    assert message.format(dir=tmp_path) in err


def test_cleanup_needs_exactly_one_way_to_name_the_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert _cleanup_here(capsys)[0] == 64
    assert _cleanup_here(capsys, "--invocation", "a", "--state-dir", ".")[0] == 64
    assert _cleanup_here(capsys, "--invocation", "") == (
        64,
        "",
        "ddsup: error: --invocation needs a non-empty invocation id\n",
    )


async def test_cleanup_ends_a_run_started_through_the_api(
    invocation_id: str, tmp_path: Path
) -> None:
    """The processes ddsup itself starts are found by the same id."""
    child = await spawn(py(SLEEP), env=run_env(invocation_id), cwd=".", log_path=tmp_path / "log")
    result = await trio.run_process(
        [sys.executable, "-m", "ddsup", "cleanup", "--invocation", invocation_id],
        capture_stdout=True,
        env={**os.environ},
    )
    assert result.stdout == f"ended 1 process(es) of run {invocation_id}\n".encode()
    assert (await child.wait()).signal == signal.SIGKILL


def _run_dir(path: Path, invocation_id: str, job: str | None) -> Path:
    path.mkdir(mode=0o700)
    (path / "run.json").write_text(json.dumps({"invocation_id": invocation_id, "job": job}))
    return path


def test_cleanup_by_job_ends_only_the_runs_recorded_as_that_job_s(
    invocation_id: str, tmp_path: Path
) -> None:
    """A process of job 71 names its run's state directory: ended when that run says job
    71; left alone when the run it names (whose id it inherited) says job 70, or none."""
    mine = _run_dir(tmp_path / "mine", invocation_id, "71")
    other = _run_dir(tmp_path / "other", invocation_id + "-other", "70")
    bare = _run_dir(tmp_path / "bare", invocation_id + "-bare", None)
    procs = {
        name: _start({**run_env(run_id), "SLURM_JOB_ID": "71", "DDSUP_STATE_DIR": str(path)})
        for name, run_id, path in (
            ("mine", invocation_id, mine),
            ("other", invocation_id + "-other", other),
            ("bare", invocation_id + "-bare", bare),
        )
    }
    try:
        done = _cleanup("--job", "71", "--user", str(os.geteuid()))
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == [
            f"left alone: run {invocation_id}-bare in {bare} is of job (none), not 71",
            f"ended 1 process(es) of run {invocation_id} (job 71, {mine})",
            f"left alone: run {invocation_id}-other in {other} is of job 70, not 71",
        ]
        assert procs["mine"].wait(timeout=10) == -signal.SIGKILL
        assert alive(procs["other"].pid) and alive(procs["bare"].pid)
        named = _run_dir(tmp_path / "ddsup-71", invocation_id + "-named", "71")
        again = _cleanup("--job", "71", "--state-dirs", f"{tmp_path}/ddsup-%j")
        assert again.returncode == 0, again.stderr
        assert f"ended 0 process(es) of run {invocation_id}-named (job 71, {named})" in again.stdout
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()


def test_cleanup_by_job_passes_over_the_other_jobs_a_glob_matches(
    invocation_id: str, tmp_path: Path
) -> None:
    """State directories named after their jobs: slurmd does not give the epilog the
    job's name, so its glob matches every job's, and only this job's run gets a line."""
    runs = tmp_path / "runs"
    runs.mkdir(mode=0o700)
    mine = _run_dir(runs / "llama-batch", invocation_id, "71")
    _run_dir(runs / "other-batch", invocation_id + "-other", "70")
    (runs / "notes.txt").write_text("not a run\n")
    done = _cleanup("--job", "71", "--state-dirs", f"{runs}/*")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"ended 0 process(es) of run {invocation_id} (job 71, {mine})"
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--invocation", "x", "--user", "0"], "--user and --state-dirs go with --job"),
        (["--job", "7 8"], "--job needs a Slurm job id, not '7 8'"),
        (["--job", "7", "--user", "no-such-user-here"], "no such user on this node"),
    ],
)
def test_cleanup_by_job_usage_errors(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, err = _cleanup_here(capsys, *args)
    assert status == 64
    assert message in err
