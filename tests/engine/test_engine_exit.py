"""``ddsup start``'s exit status and ``result.json`` on every way a run can end.

The worker's own exit status is the run's (0..255, 128+N for a signal). The sample of
worker exits runs as one batch of concurrent ``ddsup start`` processes (a module
fixture), so the parametrised tests cost one start-up, not nine.
"""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

from support.runs import Run, run_start, start_argv, start_env
from support.unit_dirs import UnitDir

EXIT_CODES = (0, 1, 2, 3, 42, 64, 70, 127, 255)
KILL_SIGNALS = {"SIGKILL": 9, "SIGUSR1": 10}


def _worker_units(path: Path, script: str) -> UnitDir:
    units = UnitDir(path)
    units.add("helper", "service", ["sleep", "60"])
    units.add("worker", "worker", ["sh", "-c", script], unit={"after": ["helper"]})
    return units


@pytest.fixture(scope="module")
def worker_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    """One run per sample exit, all at once; each ends with its worker."""
    base = tmp_path_factory.mktemp("exits")
    scripts = {f"code {c}": f"exit {c}" for c in EXIT_CODES}
    scripts |= {f"signal {s}": f"kill -{s[3:]} $$" for s in KILL_SIGNALS}
    started = {}
    for key, script in scripts.items():
        name = key.replace(" ", "-")
        units = _worker_units(base / name, script)
        state = base / f"{name}.state"
        process = subprocess.Popen(
            start_argv(units, state),
            env=start_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        started[key] = (process, state)
    runs = {}
    try:
        for key, (process, state) in started.items():
            output, _ = process.communicate(timeout=60)
            runs[key] = Run(state, process.returncode, output.decode(errors="replace"))
    finally:
        for process, _ in started.values():
            if process.poll() is None:
                process.kill()
                process.wait()
    return runs


@pytest.mark.parametrize("code", EXIT_CODES)
def test_worker_exit_status_is_the_run_exit_status(worker_runs: dict[str, Run], code: int) -> None:
    run = worker_runs[f"code {code}"]
    assert run.returncode == code, run.describe()
    result = run.result()
    assert result["status"] == ("ok" if code == 0 else "worker_failed")
    assert result["exit_code"] == code
    assert result["cause"]["unit"] == "worker"
    assert result["cause"]["exit"] == {"code": code}
    assert run.events()[-1]["reason"] == "finished"


@pytest.mark.parametrize("name", sorted(KILL_SIGNALS))
def test_worker_killed_by_signal_is_128_plus_n(worker_runs: dict[str, Run], name: str) -> None:
    run = worker_runs[f"signal {name}"]
    assert run.returncode == 128 + KILL_SIGNALS[name], run.describe()
    result = run.result()
    assert result["status"] == "worker_failed"
    assert result["exit_code"] == 128 + KILL_SIGNALS[name]
    assert result["cause"]["unit"] == "worker"
    assert result["cause"]["exit"] == {"signal": name}


async def test_unit_failure_with_stop_all_ends_the_run_70(tmp_path: Path) -> None:
    units = UnitDir(tmp_path / "units")
    units.add("broken", "service", ["sh", "-c", "exit 4"])
    units.add("worker", "worker", ["sleep", "60"], unit={"after": ["broken"]})
    run = await run_start(units, tmp_path / "state")
    assert run.returncode == 70, run.describe()
    result = run.result()
    assert result["status"] == "unit_failed"
    assert result["cause"]["unit"] == "broken"
    assert result["cause"]["exit"] == {"code": 4}
    # the worker was stopped by the stop sequence, not left running
    assert run.transitions("worker")[-1]["to"] in ("exited", "failed")


@pytest.mark.parametrize("flag", ["-v", "-q"], ids=["verbose", "quiet"])
def test_invalid_units_exit_65_each_problem_once_no_state(tmp_path: Path, flag: str) -> None:
    units = UnitDir(tmp_path / "units")
    units.add("worker", "worker", ["true"], service={"restrat": "always", "timeout_stop": 3})
    done = subprocess.run(
        [*start_argv(units, tmp_path / "state", verbose=False), flag],
        env=start_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 65, done.stderr
    problems = done.stderr.splitlines()
    assert len(problems) == 3, done.stderr  # two problems, then one summary line
    assert sum("restrat" in line for line in problems) == 1
    assert sum("timeout_stop" in line for line in problems) == 1
    assert problems[-1].startswith("ddsup: error: 2 problems in the unit files of")
    assert done.stdout == ""
    assert not (tmp_path / "state").exists()  # nothing began: no state directory


def _lane(units: UnitDir, *, port: int | str, replicas: int) -> None:
    units.add(
        "lane@",
        "lane",
        ["sleep", "60"],
        lane={"model": "m", "gpus": 1, "replicas": replicas, "port": port, "stagger": "0s"},
    )
    units.add("worker", "worker", ["true"], unit={"after": ["lane"]})


@pytest.mark.slow  # node agents: a few seconds each
async def test_planned_port_in_use_fails_preflight_69(tmp_path: Path) -> None:
    units = UnitDir(tmp_path / "units")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        _lane(units, port=port, replicas=1)
        run = await run_start(units, tmp_path / "state", "--gpus-per-node", "1")
    assert run.returncode == 69, run.describe()
    result = run.result()
    assert result["status"] == "preflight_failed"
    assert str(port) in result["cause"]["reason"]
    assert not run.transitions("lane@0", "starting"), "a lane started despite preflight"
    assert not run.transitions("worker", "starting")


async def test_more_replicas_than_gpus_fails_69_before_the_run(tmp_path: Path) -> None:
    units = UnitDir(tmp_path / "units")
    _lane(units, port="auto", replicas=3)
    run = await run_start(units, tmp_path / "state", "--gpus-per-node", "2")
    assert run.returncode == 69, run.describe()
    assert "Traceback" not in run.output
    errors = [line for line in run.output.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0].startswith("ddsup: error: lane unit 'lane@'"), errors
    assert not run.state.exists()  # a plan that does not fit: nothing began


@pytest.mark.parametrize(
    "argv", [["nodir"], ["units", "--nodes", "0"]], ids=["no-directory", "bad-flag"]
)
def test_a_bad_command_line_exits_64_once_and_leaves_no_state_dir(
    tmp_path: Path, argv: list[str]
) -> None:
    UnitDir(tmp_path / "units").add("worker", "worker", ["true"])
    done = subprocess.run(
        [*start_argv(argv[0], tmp_path / "state", verbose=False), *argv[1:], "-q"],
        env=start_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 64, done.stderr
    assert done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith("ddsup: error: ")
    assert not (tmp_path / "state").exists()
    assert not list(tmp_path.glob("ddsup-*"))
