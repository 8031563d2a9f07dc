"""The job's end and its attempts: end times, early stops, requeue, one state dir per job.

The pure parts are checked here (what squeue prints, what a stop before the end does to
the run's state, what a requeue request becomes); ``tests/slurm/test_long_jobs.py`` runs
them in real jobs. A requeue outside Slurm, and an attempt number from the environment,
are checked through real local runs.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import trio
import trio.testing

from ddsup._errors import ResultStatus
from ddsup.controller._own_job import _run, attempt_of, parse_end_time, settle_requeue
from ddsup.decide._run_inputs import EndNear, Host, Observed, PreflightOver, StartOn, StopOn
from ddsup.decide._run_state import RunState
from ddsup.plan import Plan
from ddsup.process import ExitStatus, fork_lock
from ddsup.record._events import UnitTransition
from ddsup.record._outcome import Outcome, WorkerEnded
from ddsup.record._state_dir import create_state_dir
from ddsup.record._states import InstanceState as S
from ddsup.units._model import UnitSet
from support import units as u
from support.runs import PY, run_start
from support.unit_dirs import UnitDir


def test_squeue_end_times_are_local_time_and_unlimited_jobs_have_none() -> None:
    expected = time.mktime((2026, 12, 3, 4, 14, 6, 0, 0, -1))
    assert parse_end_time("2026-12-03T04:14:06\n") == expected
    assert parse_end_time("2026-12-03T04:14:06\n2026-12-03T04:14:06\n") == expected  # het job
    for nothing in ("", "N/A\n", "Unknown", "NONE"):
        assert parse_end_time(nothing) is None


def test_slurm_s_restart_count_says_whether_the_job_was_requeued() -> None:
    assert attempt_of({}) == 0 and attempt_of({"SLURM_RESTART_COUNT": "2"}) == 2
    assert attempt_of({"SLURM_RESTART_COUNT": "x"}) == 0


def test_a_requeued_job_goes_on_in_its_default_state_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.chdir(tmp_path)
    assert create_state_dir(None).path == tmp_path / "ddsup-4242"
    assert create_state_dir(None, requeued=True).path == tmp_path / "ddsup-4242"
    assert create_state_dir(None).path == tmp_path / "ddsup-4242.2"  # not requeued: a new one
    given = create_state_dir(tmp_path / "run", requeued=True)
    assert given.path == tmp_path / "run" and given.path.is_dir()


def test_the_end_near_stops_the_unit_and_it_never_starts_later() -> None:
    run = RunState(*_units_and_plan())
    run.handle(PreflightOver(120.0))
    assert run.handle(EndNear("worker", "stop_before_end = 10m")) == [
        StopOn(Host("n1", agent=False), ("worker",), "stop_before_end = 10m")
    ]
    ready = Observed(
        UnitTransition(
            instance="svc", node="n1", from_state=S.STARTING, to_state=S.READY, reason="r"
        )
    )
    assert [d for d in run.handle(ready) if isinstance(d, StartOn)] == []


def _units_and_plan() -> tuple[UnitSet, Plan]:
    units = u.unit_set(u.service("svc"), u.worker(after=("svc",)))
    return units, u.plan(units)


def test_a_worker_asking_for_a_requeue_outside_slurm_fails_saying_why() -> None:
    outcome = Outcome.of(WorkerEnded("worker", ExitStatus(code=85), "exit status 85"))
    assert (outcome.status, outcome.exit_code) == (ResultStatus.REQUEUED, 85)
    settled = trio.run(settle_requeue, outcome, None)
    assert (settled.status, settled.exit_code) == (ResultStatus.WORKER_FAILED, 85)
    assert settled.reason == (
        "exit status 85: it asked for a requeue (exit status 85), but this run is not in a "
        "Slurm job"
    )


# The worker: its attempt and requeue status as ddsup gave them, then the requeue status.
WORKER_PY = """\
import json, os, sys
seen = {k: os.environ[k] for k in ("DDSUP_ATTEMPT", "DDSUP_REQUEUE_EXIT", "DDSUP_STATE_DIR")}
with open(os.path.join(os.environ["DDSUP_STATE_DIR"], "seen.json"), "w") as out:
    json.dump({**seen, "argv": sys.argv[1:]}, out)
sys.exit(int(os.environ["DDSUP_REQUEUE_EXIT"]))
"""


async def test_a_job_run_again_goes_on_in_its_state_dir_and_tells_the_units(
    tmp_path: Path,
) -> None:
    units = UnitDir(tmp_path / "units")
    (units.path / "worker.py").write_text(WORKER_PY)
    units.add("worker", "worker", [PY, "{unit_dir}/worker.py", "{attempt}"])
    state = tmp_path / "state"
    first = await run_start(units, state)
    first_result = (state / "result.json").read_text()
    run = await run_start(units, state, env={"SLURM_RESTART_COUNT": "5"})  # not what counts

    seen = json.loads((state / "seen.json").read_text())
    assert seen == {
        "DDSUP_ATTEMPT": "1",
        "DDSUP_REQUEUE_EXIT": "85",
        "DDSUP_STATE_DIR": str(state),
        "argv": ["1"],
    }
    assert first.returncode == run.returncode == 85
    assert (state / "attempts" / "0" / "result.json").read_text() == first_result
    assert json.loads((state / "run.json").read_text())["attempt"] == 1
    result = json.loads((state / "result.json").read_text())
    assert result["status"] == "worker_failed"
    assert "but this run is not in a Slurm job" in result["cause"]["reason"]
    shown = await _status("--state-dir", str(state))
    assert f"state dir {state} · attempt 1 (the one before in attempts/)" in shown
    earlier = json.loads(await _status("--json", "--state-dir", str(state / "attempts" / "0")))
    assert (earlier["attempt"], earlier["result"]["exit_code"]) == (0, 85)


async def _status(*args: str) -> str:
    done = await trio.run_process(
        [PY, "-m", "ddsup", "status", *args], capture_stdout=True, check=True
    )
    return done.stdout.decode()


async def test_a_slurm_query_is_not_forked_while_a_unit_is(tmp_path: Path) -> None:
    """``ddsup start`` forks a unit from a worker thread while it sits in the unit's
    cgroup; a child forked by another task meanwhile would be born in that cgroup. So
    the Slurm client's command (``squeue``, ``scontrol``) waits for the fork lock, and
    runs once it is free."""
    marker = tmp_path / "ran"
    done: list[object] = []

    async def query() -> None:
        done.append(await _run(["touch", str(marker)]))

    lock = fork_lock()
    async with trio.open_nursery() as nursery, lock:  # a unit's fork in flight
        nursery.start_soon(query)
        await trio.testing.wait_all_tasks_blocked()  # the query waits: for what?
        assert lock.statistics().tasks_waiting == 1, "it did not wait for the fork lock"
        assert not marker.exists(), "the command was forked while the lock was held"
    assert marker.exists() and len(done) == 1 and not isinstance(done[0], str), done
