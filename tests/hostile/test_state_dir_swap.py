"""A state directory another user could move: refused, or held so that moving it is moot.

Root runs ``ddsup start``; the second user owns a directory above the state directory.
Where that user may replace the state directory itself (it owns the parent, or the
parent is writable by others and not sticky), ``start`` refuses it (73) before writing
anything. Higher up, the user may still rename the parent and put a directory of its
own, or a symlink, where the state directory was; ``ddsup start`` holds its state
directory open from its creation, so every later write lands in the directory it made
(wherever that now is), none in the user's, and its sentinel, after a SIGKILL of
``ddsup start``, reads the records ``ddsup start`` wrote, not forged ones that name an
unrelated process.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hostile_helpers import WORKER_STATUS
from second_user import SecondUser, as_root_only

from ddsup.process._proc import is_dead, start_time
from ddsup.process._registry import Machine
from support.polls import until_sync
from support.runs import PY, end, read_events, run_start, start_argv, start_env
from support.unit_dirs import UnitDir

RELEASE_PY = """\
import os, sys, time
deadline = time.monotonic() + 120
while not os.path.exists(sys.argv[1]):
    if time.monotonic() > deadline:
        sys.exit(99)
    time.sleep(0.05)
sys.exit(7)
"""


def _units(path: Path, release: Path) -> UnitDir:
    """One worker, which exits 7 once ``release`` exists."""
    units = UnitDir(path)
    (path / "release.py").write_text(RELEASE_PY)
    units.add("worker", "worker", [PY, str(path / "release.py"), str(release)])
    return units


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory both root and the second user can reach (tmp_path's parents are 0700)."""
    base = Path(tempfile.mkdtemp(prefix="ddsup-swap-", dir="/tmp"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _listing(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


async def test_a_parent_others_may_write_is_refused_unless_sticky(tmp_path: Path) -> None:
    """A non-sticky parent that others may write: they could swap the directory."""
    units = _units(tmp_path / "units", tmp_path / "release")
    (tmp_path / "release").touch()
    open_parent = tmp_path / "open"
    open_parent.mkdir()
    open_parent.chmod(0o777)
    run = await run_start(units, open_parent / "state")
    assert run.returncode == 73, run.describe()
    assert f"{open_parent} (mode 777) may be written by other users" in run.output
    assert "Traceback" not in run.output
    assert list(open_parent.iterdir()) == []
    open_parent.chmod(0o1777)  # sticky, as /tmp: only an entry's owner may rename it
    run = await run_start(units, open_parent / "state")
    assert run.returncode == WORKER_STATUS, run.describe()


@as_root_only
def test_a_parent_of_another_user_is_refused(tmp_path: Path, second_user: SecondUser) -> None:
    """Root's state directory in a directory the second user owns, named or by default."""
    units = _units(tmp_path / "units", tmp_path / "release")
    (tmp_path / "release").touch()
    theirs = second_user.owns(tmp_path / "theirs")
    for extra, cwd in ((["--state-dir", str(theirs / "state")], None), ([], theirs)):
        done = subprocess.run(
            [PY, "-m", "ddsup", "start", str(units.path), *extra],
            cwd=cwd,
            env=start_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 73, done.stderr
        assert f"{theirs} belongs to uid {second_user.uid}, who could replace" in done.stderr
        assert list(theirs.iterdir()) == []


def _start(units: UnitDir, state: Path, output: Path) -> subprocess.Popen[bytes]:
    with output.open("wb") as out:
        return subprocess.Popen(start_argv(units, state), env=start_env(), stdout=out, stderr=out)


def _worker(state: Path) -> int:
    """The worker's pid, once it is ready (from ``events.jsonl``)."""
    pids = [e["pid"] for e in read_events(state, live=True) if e.get("event") == "process"]
    ready = any(e.get("to") == "ready" for e in read_events(state, live=True))
    return pids[-1] if pids and ready else 0


@as_root_only
def test_writes_after_a_swap_land_in_the_run_s_own_directory(
    shared: Path, second_user: SecondUser
) -> None:
    """The user renames the parent and leaves a symlink where the state directory was:
    root wrote result.json, events and logs through it into the link's target."""
    users = second_user.owns(shared / "user")
    parent = users / "jobs"  # root's (0755): the parent check passes
    parent.mkdir(mode=0o755)
    target = second_user.owns(shared / "target")
    units = _units(shared / "units", shared / "release")
    process = _start(units, parent / "state", shared / "output")
    try:
        until_sync(lambda: _worker(parent / "state"), "the worker to be ready", limit=30)
        swap = f"mv {parent} {users}/old && mkdir {parent} && ln -s {target} {parent}/state"
        done = second_user.run(["sh", "-c", swap])
        assert done.returncode == 0, done.stderr
        (shared / "release").touch()
        assert process.wait(timeout=60) == WORKER_STATUS
    finally:
        end(process)
    assert _listing(target) == [], "root wrote into the directory the user swapped in"
    real = users / "old" / "state"
    assert json.loads((real / "result.json").read_text())["exit_code"] == WORKER_STATUS
    assert read_events(real)[-1]["event"] == "run"
    assert "Traceback" not in (shared / "output").read_text()


@as_root_only
def test_the_sentinel_reads_its_own_records_not_swapped_in_ones(
    shared: Path, second_user: SecondUser
) -> None:
    """A swapped-in directory whose ``containment`` names an unrelated root process: after
    a SIGKILL of ``ddsup start`` its sentinel ended that process and not the run."""
    users = second_user.owns(shared / "user")
    parent = users / "jobs"
    parent.mkdir(mode=0o755)
    units = _units(shared / "units", shared / "release")
    bystander = subprocess.Popen([PY, "-c", "import time; time.sleep(120)"])
    try:
        forged = users / "forged" / "state" / "containment"
        forged.mkdir(parents=True)
        machine = {"machine": Machine.here().to_json(), "sentinel": None}
        (forged / "controller.json").write_text(json.dumps(machine))
        pid_start = start_time(bystander.pid)
        (forged / "controller.pids").write_text(f"{bystander.pid} {pid_start} worker\n")
        for path in [users / "forged", *(users / "forged").rglob("*")]:
            os.chown(path, second_user.uid, second_user.gid)
        process = _start(units, parent / "state", shared / "output")
        try:
            worker = until_sync(lambda: _worker(parent / "state"), "the worker", limit=30)
            swap = f"mv {parent} {users}/old && mv {users}/forged {parent}"
            done = second_user.run(["sh", "-c", swap])
            assert done.returncode == 0, done.stderr
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=10)
            until_sync(lambda: is_dead(worker), "the sentinel to end the worker")
        finally:
            end(process)
        assert bystander.poll() is None, "the sentinel killed a process a forged file named"
    finally:
        bystander.kill()
        bystander.wait()
