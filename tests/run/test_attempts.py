"""A job's attempts in one state directory: the previous record kept, a live run refused.

``begin_attempt`` runs before ``ddsup start`` writes anything; these tests give it the
record a previous run left (finished, killed, or still live here or on another host)
and check what the new attempt finds. ``tests/run/test_job_end.py`` runs a job twice
through ``ddsup start``; ``tests/slurm/test_long_jobs.py`` requeues and resubmits one;
``tests/hostile/test_disk_faults.py`` begins one on a full disk.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ddsup._errors import StateDirError
from ddsup.process._file_at import open_file
from ddsup.process._proc import read_stat
from ddsup.record._attempts import begin_attempt, keep_previous
from ddsup.record._private import APPEND_FLAGS
from ddsup.record._state_dir import (
    RESERVE,
    RESERVE_BYTES,
    ControlAddress,
    RunInfo,
    StateDir,
    hold_state_dir,
    state_dir_in,
)


@pytest.fixture
def attempts() -> Iterator[list[StateDir]]:
    """The state dirs a test began; let go of at its end, as ``ddsup start`` does."""
    begun: list[StateDir] = []
    yield begun
    for state in begun:
        state.close()


def _begin(path: Path, begun: list[StateDir]) -> tuple[StateDir, int]:
    state, attempt = begin_attempt(path)
    begun.append(state)
    return state, attempt


def _previous(
    state: StateDir,
    *,
    finished: bool = True,
    pid: int | None = None,
    host: str | None = None,
    control: ControlAddress | None = None,
) -> None:
    """The record a run leaves: run.json, events, a log, the result when it finished."""
    pid = os.getpid() if pid is None else pid
    stat = read_stat(pid)
    info = RunInfo(
        invocation_id="before",
        pid=pid,
        pid_start=stat.start_time if stat else 1,
        host=host or socket.gethostname(),
        control=control,
    )
    state.write_json(state.run, info.to_json())
    state.events.write_text('{"event": "run"}\n')
    state.log("worker").write_text("the worker's log\n")
    (state.path / "series").mkdir()
    if finished:
        state.write_json(state.result, {"status": "ok", "exit_code": 0})


def _dead_pid() -> int:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    return int(gone.stdout)


def test_the_first_attempt_is_0_and_moves_nothing(tmp_path: Path, attempts: list[StateDir]) -> None:
    state, attempt = _begin(tmp_path / "job", attempts)
    assert attempt == 0
    assert sorted(os.listdir(state.path)) == [RESERVE, "logs"]


def test_the_previous_attempt_is_kept_whole_and_the_units_files_stay(
    tmp_path: Path, attempts: list[StateDir]
) -> None:
    state, _ = _begin(tmp_path / "job", attempts)
    _previous(state)
    (state.path / "results.jsonl").write_text('{"id": "p1"}\n')  # the worker's

    state, attempt = _begin(tmp_path / "job", attempts)
    assert attempt == 1
    kept = state.path / "attempts" / "0"
    assert sorted(os.listdir(kept)) == [
        "events.jsonl", "logs", "result.json", "run.json", "series",
    ]  # fmt: skip
    assert (kept / "logs" / "worker.log").read_text() == "the worker's log\n"
    assert sorted(os.listdir(state.path)) == [RESERVE, "attempts", "logs", "results.jsonl"]
    assert not os.listdir(state.logs)
    assert oct(kept.stat().st_mode & 0o777) == oct(0o700)

    _previous(state)
    state, attempt = _begin(tmp_path / "job", attempts)
    assert attempt == 2
    assert sorted(os.listdir(state.path / "attempts")) == ["0", "1"]


def test_the_new_attempt_writes_its_logs_in_a_new_logs_dir(
    tmp_path: Path, attempts: list[StateDir]
) -> None:
    """The previous ``logs/`` moves away whole; the new attempt's logs land in its own."""
    state, _ = _begin(tmp_path / "job", attempts)
    _previous(state)
    state, _ = _begin(tmp_path / "job", attempts)
    fd = open_file(state.log_file("worker"), APPEND_FLAGS)
    os.write(fd, b"attempt 1\n")
    os.close(fd)
    assert state.log("worker").read_text() == "attempt 1\n"
    kept = state.path / "attempts" / "0" / "logs" / "worker.log"
    assert kept.read_text() == "the worker's log\n"


def test_the_move_goes_through_the_held_directory(tmp_path: Path) -> None:
    """A directory swapped in at the path after it was held gets nothing: the record is
    moved where it was, and the new attempt is written there."""
    path = tmp_path / "job"
    first = state_dir_in(hold_state_dir(path))
    _previous(first)
    first.close()
    held = hold_state_dir(path)
    os.rename(path, tmp_path / "moved")
    (tmp_path / "decoy").mkdir(mode=0o700)
    path.symlink_to(tmp_path / "decoy")

    assert keep_previous(held) == 1
    state = state_dir_in(held)
    state.write_json(state.run, RunInfo(invocation_id="after").to_json())
    state.close()
    assert os.listdir(tmp_path / "decoy") == []
    moved = tmp_path / "moved"
    assert (moved / "attempts" / "0" / "run.json").exists()
    assert json.loads((moved / "run.json").read_text())["invocation_id"] == "after"


def test_links_in_the_record_are_moved_aside_as_links_never_followed(
    tmp_path: Path, attempts: list[StateDir]
) -> None:
    """A run.json linked to a live run's is not that run (not read through the link), and
    a logs/ linked to another directory is moved, not emptied or written into."""
    outside = tmp_path / "outside"
    (outside / "logs").mkdir(parents=True)
    (outside / "logs" / "precious.log").write_text("precious\n")
    me = read_stat(os.getpid())
    assert me is not None
    live = RunInfo(invocation_id="live", pid=os.getpid(), pid_start=me.start_time)
    (outside / "run.json").write_text(json.dumps(live.to_json()))
    path = tmp_path / "job"
    path.mkdir(mode=0o700)
    (path / "run.json").symlink_to(outside / "run.json")
    (path / "logs").symlink_to(outside / "logs")

    state, attempt = _begin(path, attempts)
    assert attempt == 1
    kept = path / "attempts" / "0"
    assert (kept / "run.json").is_symlink() and (kept / "logs").is_symlink()
    assert os.readlink(kept / "logs") == str(outside / "logs")
    assert not state.logs.is_symlink() and os.listdir(state.logs) == []
    assert os.listdir(outside / "logs") == ["precious.log"]
    assert json.loads((outside / "run.json").read_text())["invocation_id"] == "live"


def test_a_killed_attempt_s_space_for_the_result_is_not_its_record(
    tmp_path: Path, attempts: list[StateDir]
) -> None:
    """It stays out of ``attempts/``, and the next attempt keeps its own in full."""
    state, _ = _begin(tmp_path / "job", attempts)
    _previous(state, finished=False, pid=_dead_pid())  # killed: its reserve is left
    assert (state.path / RESERVE).exists()

    state, attempt = _begin(tmp_path / "job", attempts)
    assert attempt == 1
    assert RESERVE not in os.listdir(state.path / "attempts" / "0")
    assert (state.path / RESERVE).stat().st_size == RESERVE_BYTES
    assert state.release_reserve()

    only_reserve = tmp_path / "bare"
    only_reserve.mkdir(mode=0o700)
    (only_reserve / RESERVE).write_bytes(b"x")
    state, attempt = _begin(only_reserve, attempts)
    assert attempt == 0 and not (only_reserve / "attempts").exists()


def test_a_live_run_here_is_never_taken_over(tmp_path: Path, attempts: list[StateDir]) -> None:
    state, _ = _begin(tmp_path / "job", attempts)
    _previous(state, finished=False)  # its ddsup start: this very process, alive

    with pytest.raises(StateDirError, match=rf"still live \(its ddsup start, pid {os.getpid()}"):
        begin_attempt(tmp_path / "job")
    assert state.run.exists() and not (state.path / "attempts").exists()


def test_a_killed_run_is_over(tmp_path: Path, attempts: list[StateDir]) -> None:
    state, _ = _begin(tmp_path / "job", attempts)
    _previous(state, finished=False, pid=_dead_pid())

    state, attempt = _begin(tmp_path / "job", attempts)
    assert attempt == 1
    assert (state.path / "attempts" / "0" / "run.json").exists()


def test_a_run_on_another_host_is_live_while_its_control_port_answers(
    tmp_path: Path, attempts: list[StateDir]
) -> None:
    state, _ = _begin(tmp_path / "job", attempts)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        control = ControlAddress("127.0.0.1", listener.getsockname()[1])
        _previous(state, finished=False, host="elsewhere", control=control)
        with pytest.raises(StateDirError, match=r"its control channel on elsewhere .* answers"):
            begin_attempt(tmp_path / "job")
    assert _begin(tmp_path / "job", attempts)[1] == 1  # the port closed with its run


def test_kept_attempts_must_be_private(tmp_path: Path, attempts: list[StateDir]) -> None:
    state, _ = _begin(tmp_path / "job", attempts)
    _previous(state)
    (state.path / "attempts").mkdir(mode=0o777)
    os.chmod(state.path / "attempts", 0o777)

    with pytest.raises(StateDirError, match="attempts"):
        begin_attempt(tmp_path / "job")
    assert state.run.exists()


def test_run_json_says_which_attempt_it_is() -> None:
    info = RunInfo(invocation_id="x", attempt=3, job="42", uid=1000)
    again = RunInfo.from_json(json.loads(json.dumps(info.to_json())))
    assert (again.attempt, again.job, again.uid) == (3, "42", 1000)
    assert RunInfo.from_json({"invocation_id": "x"}).attempt == 0  # written before attempts
