"""The state directory cannot be turned against anyone: links, a foreign owner, logs.

``ddsup start`` refuses (73) an existing state directory that is another user's, that
others may write, or that is a symlink, and never writes through a symlink planted in
its own; ``status``/``stop``/``logs`` refuse (77) files that are not the caller's, never
send the run's secret to a port a stale or planted ``run.json`` names, never signal a
pid that is not the run's ``ddsup start``, and read only logs of the run's instances.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hostile_helpers import ddsup
from second_user import SecondUser, as_root_only

from ddsup.record._event_log import EventLog
from ddsup.record._events import RunStopping
from ddsup.record._faults import WriteFaults
from ddsup.record._private import open_append, write_private
from support.runs import PY, run_start, start_env
from support.unit_dirs import UnitDir


def _units(path: Path) -> UnitDir:
    units = UnitDir(path)
    units.add("worker", "worker", ["sh", "-c", "echo done; exit 7"])
    return units


def _listing(path: Path) -> dict[str, tuple[int, int]]:
    """Every entry under ``path``: name → (mode, size), to show nothing changed."""
    found = {}
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            status = os.lstat(os.path.join(root, name))
            found[os.path.relpath(os.path.join(root, name), path)] = (
                status.st_mode,
                status.st_size,
            )
    return found


async def test_an_existing_state_dir_others_may_write_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    state.chmod(0o777)
    run = await run_start(_units(tmp_path / "units"), state)
    assert run.returncode == 73, run.describe()
    assert "may be written by other users" in run.output
    assert list(state.iterdir()) == []
    assert "Traceback" not in run.output


async def test_a_symlink_as_the_state_dir_is_refused_and_its_target_untouched(
    tmp_path: Path,
) -> None:
    """A planted link must not be followed and its target chmodded."""
    target = tmp_path / "target"
    target.mkdir(mode=0o755)
    (tmp_path / "state").symlink_to(target)
    before = (os.stat(target).st_mode, _listing(target))
    run = await run_start(_units(tmp_path / "units"), tmp_path / "state")
    assert run.returncode == 73, run.describe()
    assert "is a symlink" in run.output
    assert (os.stat(target).st_mode, _listing(target)) == before


@as_root_only
async def test_a_state_dir_of_another_user_is_refused(
    tmp_path: Path, second_user: SecondUser
) -> None:
    """Root must not use a directory another user owns, nor its planted links."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (state / "events.jsonl").symlink_to(victim)
    second_user.owns(state)
    run = await run_start(_units(tmp_path / "units"), state)
    assert run.returncode == 73, run.describe()
    assert f"belongs to uid {second_user.uid}" in run.output
    assert victim.read_text() == "precious\n"
    assert sorted(p.name for p in state.iterdir()) == ["events.jsonl"]


RECORD_LINKS = ("events.jsonl", "logs/worker.log", "result.json", "plan.json", "run.json")


def _plant(state: Path, outside: Path) -> None:
    """A link from each of a run's files in ``state`` to a precious file ``outside``."""
    (state / "logs").mkdir(parents=True, mode=0o700, exist_ok=True)
    outside.mkdir(exist_ok=True)
    for name in RECORD_LINKS:
        (outside / name.replace("/", "-")).write_text("precious\n")
        (state / name).symlink_to(outside / name.replace("/", "-"))


async def test_links_planted_in_the_state_dir_are_never_written_through(tmp_path: Path) -> None:
    """They look like an earlier attempt's record: kept aside as links, never followed."""
    state, outside = tmp_path / "state", tmp_path / "outside"
    _plant(state, outside)
    before = _listing(outside)
    run = await run_start(_units(tmp_path / "units"), state)
    assert run.returncode == 7, run.describe()  # the run went on, and ended as its worker did
    assert _listing(outside) == before
    assert all((outside / n).read_text() == "precious\n" for n in os.listdir(outside))
    assert json.loads((state / "result.json").read_text())["exit_code"] == 7
    assert all((state / "attempts" / "0" / name).is_symlink() for name in RECORD_LINKS)
    assert not any((state / name).is_symlink() for name in RECORD_LINKS)
    assert "Traceback" not in run.output


def test_appends_and_replacements_never_follow_a_planted_link(tmp_path: Path) -> None:
    """Appends are O_NOFOLLOW, replacements rename over the link: bytes outside: 0."""
    state, outside = tmp_path / "state", tmp_path / "outside"
    _plant(state, outside)
    before = _listing(outside)
    with pytest.raises(OSError, match="Too many levels of symbolic links"):
        open_append(state / "events.jsonl")
    log = EventLog(state / "events.jsonl", WriteFaults())
    log.write(RunStopping())
    log.close()
    write_private(state / "result.json", "{}\n")
    assert _listing(outside) == before
    assert (state / "events.jsonl").is_symlink() and not (state / "result.json").is_symlink()


def _planted(tmp_path: Path, run: dict[str, object]) -> Path:
    """A state directory whose run.json says ``run`` and whose secret is ``s3cret``."""
    state = tmp_path / "planted"
    state.mkdir(mode=0o700)
    (state / "run.json").write_text(json.dumps({"invocation_id": "x" * 32, **run}))
    (state / "control.secret").write_text("s3cret\n")
    (state / "control.secret").chmod(0o600)
    return state


def test_status_sends_no_secret_to_a_port_whose_run_is_gone(tmp_path: Path) -> None:
    """A ``run.json`` naming an attacker's port must not make status send the secret."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(0.1)
        port = listener.getsockname()[1]
        # the pid is alive but is not the run's (it has no start time in run.json)
        state = _planted(
            tmp_path, {"pid": os.getpid(), "control": {"host": "127.0.0.1", "port": port}}
        )
        status = ddsup("status", "--state-dir", str(state))
        try:
            connection, _ = listener.accept()
            connection.close()
            pytest.fail("ddsup status connected to the port of a run that is gone")
        except TimeoutError:
            pass
    assert status.returncode == 0, status.stderr
    assert "not answering" in status.stdout


def test_a_symlinked_secret_is_refused(tmp_path: Path) -> None:
    state = _planted(tmp_path, {"pid": os.getpid(), "host": socket.gethostname()})
    (tmp_path / "other.secret").write_text("someone else's\n")
    (state / "control.secret").unlink()
    (state / "control.secret").symlink_to(tmp_path / "other.secret")
    (state / "run.json").write_text(
        json.dumps(
            {
                "invocation_id": "x" * 32,
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "pid_start": _start_time(os.getpid()),
                "control": {"host": "127.0.0.1", "port": 9},
            }
        )
    )
    status = ddsup("status", "--state-dir", str(state))
    assert status.returncode == 77, status.stderr
    assert "control.secret is a symlink" in status.stderr
    assert "Traceback" not in status.stderr


def _start_time(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


def test_stop_signals_no_process_that_is_not_the_runs(tmp_path: Path) -> None:
    """A planted run.json naming one of the caller's processes: ``stop`` leaves it alone."""
    bystander = subprocess.Popen([PY, "-c", "import time; time.sleep(60)", "start"])
    try:
        state = _planted(
            tmp_path,
            {"pid": bystander.pid, "host": socket.gethostname(), "started_at": time.time()},
        )
        (state / "control.secret").unlink()
        stop = ddsup("stop", "--no-wait", "--state-dir", str(state))
        assert stop.returncode == 0, stop.stderr
        assert "is not running" in stop.stdout
        assert bystander.poll() is None, "ddsup stop signalled a process that is not the run"
    finally:
        bystander.kill()
        bystander.wait()


async def test_logs_names_only_instances_of_the_run(tmp_path: Path) -> None:
    """``ddsup logs ../../x`` must not read ``../../x.log``."""
    state = tmp_path / "run" / "state"
    run = await run_start(_units(tmp_path / "units"), state)
    assert run.returncode == 7, run.describe()
    (tmp_path / "run" / "x.log").write_text("not a log of the run\n")
    (tmp_path / "x.log").write_text("not a log of the run\n")
    for name in ("../../x", "../x", "/etc/passwd", "worker/../../x"):
        logs = ddsup("logs", "--state-dir", str(state), name)
        assert logs.returncode == 64, (name, logs.stdout, logs.stderr)
        assert "not a log of the run" not in logs.stdout
        assert "no log for" in logs.stderr
    assert ddsup("logs", "--state-dir", str(state), "worker").stdout == "done\n"


def test_newest_run_here_skips_directories_that_are_not_the_callers(tmp_path: Path) -> None:
    older = tmp_path / "ddsup-1"
    older.mkdir(mode=0o700)
    (older / "run.json").write_text(json.dumps({"invocation_id": "mine"}))
    newer = tmp_path / "ddsup-2"
    newer.mkdir(mode=0o700)
    (newer / "run.json").symlink_to(older / "run.json")  # not a regular file: not a run
    status = subprocess.run(
        [sys.executable, "-m", "ddsup", "status", "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=start_env(),
        timeout=30,
    )
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["state_dir"] == str(older)
