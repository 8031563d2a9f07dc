"""A full or read-only state directory: the run goes on and ends as it would have.

A full or read-only state directory must not crash the controller (exit 1, no
``result.json``). Here the state directory is a small tmpfs mounted for the test (root
only; CI runs as root): filled to the last byte while the run is up, or read-only from
the start. The run ends with its worker's status, one warning says the record is
incomplete, the result reaches ``result.json`` through the space kept for it (or, when
even that is gone, stderr), no traceback, and nothing is written outside the state
directory (the run's working directory stays empty). Afterwards ``status`` says why the
record is incomplete, and ``status`` and ``logs --since`` read what was kept, torn last
line included.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import pytest
from hostile_helpers import WORKER_STATUS, ddsup, release_units
from second_user import as_root_only

from ddsup.record._attempts import begin_attempt
from ddsup.record._run_info import RunInfo
from support.polls import until_sync
from support.runs import end, read_events, simulated, start_argv, start_env

pytestmark = as_root_only


@contextlib.contextmanager
def _tmpfs(path: Path, size: str = "1m") -> Iterator[Path]:
    path.mkdir(mode=0o700)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)], check=True
    )
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


@contextlib.contextmanager
def _ext4(path: Path, image: Path) -> Iterator[Path]:
    """A 4 MiB ext4 file system on a loop device, with no blocks kept for root: unlike
    tmpfs, every directory made on it takes a block of its space."""
    subprocess.run(["truncate", "-s", "4M", str(image)], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", "-b", "1024", str(image)], check=True)
    path.mkdir(mode=0o700)
    mounted = subprocess.run(["mount", "-o", "loop", str(image), str(path)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"no loop device to mount a file system on: {mounted.stderr!r}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _fill(directory: Path) -> None:
    """Write zeros until the file system says it is full, to the last byte."""
    with open(directory / "filler", "wb", buffering=0) as handle:
        _fill_with(handle)


def _fill_with(handle: BinaryIO) -> None:
    for block in (b"\0" * 65536, b"\0"):
        try:
            while True:
                handle.write(block)
        except OSError as err:
            if err.errno != errno.ENOSPC:
                raise


def _start(tmp_path: Path, state: Path, output: Path) -> subprocess.Popen[bytes]:
    units = release_units(tmp_path / "units", tmp_path / "release")
    workdir = tmp_path / "workdir"
    workdir.mkdir()
    with output.open("wb") as out:
        return subprocess.Popen(
            start_argv(units, state, *simulated(2, 1)),
            cwd=workdir,
            env=start_env(),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
        )


def _worker_ready(state: Path) -> bool:
    return any(
        e.get("instance") == "worker" and e.get("to") == "ready"
        for e in read_events(state, live=True)
    )


def _check_run_ended_as_its_worker(
    tmp_path: Path, process: subprocess.Popen[bytes], output: str
) -> None:
    assert process.returncode == WORKER_STATUS, output
    assert "Traceback" not in output, output
    assert os.listdir(tmp_path / "workdir") == [], "ddsup wrote outside its state directory"


def test_a_state_dir_that_fills_up_mid_run(tmp_path: Path) -> None:
    """The result still reaches result.json (through the space kept for it), which says
    the record is incomplete and why; ``status`` says so instead of "killed?"."""
    with _tmpfs(tmp_path / "disk") as disk:
        state, output = disk / "state", tmp_path / "output"
        process = _start(tmp_path, state, output)
        try:
            until_sync(lambda: _worker_ready(state), "the worker to be ready", limit=30)
            _fill(disk)
            (tmp_path / "release").touch()
            process.wait(timeout=60)
        finally:
            end(process)
        text = output.read_text(errors="replace")
        _check_run_ended_as_its_worker(tmp_path, process, text)
        assert len(re.findall("warning: cannot write", text)) == 1, text
        result = json.loads((state / "result.json").read_text())
        assert (result["status"], result["exit_code"]) == ("worker_failed", WORKER_STATUS)
        assert result["record"]["errno"] == "ENOSPC" and result["record"]["faults"] >= 1
        said = ddsup("status", "--state-dir", str(state))
        assert said.returncode == 0, said.stderr
        assert "finished: worker_failed, exit 7" in said.stdout
        assert "record incomplete: the state directory was full (No space left" in said.stdout
        assert "killed?" not in said.stdout
        os.unlink(disk / "filler")
        status = ddsup("status", "--state-dir", str(state), "--json")
        assert status.returncode == 0, status.stderr
        view = json.loads(status.stdout)
        assert {i["instance"] for i in view["instances"]} >= {"worker"}
        assert view["record_incomplete"].startswith("the state directory was full")
        logs = ddsup("logs", "--state-dir", str(state), "--since", "1h", "lane")
        assert logs.returncode == 0 and "Traceback" not in logs.stderr, logs.stderr


def test_a_state_dir_full_to_the_last_byte_at_the_end(tmp_path: Path) -> None:
    """No room even for the result (the space kept for it taken too): it goes to stderr,
    and ``status`` says that the state directory is full, not "killed?"."""
    with _tmpfs(tmp_path / "disk") as disk:
        state, output = disk / "state", tmp_path / "output"
        process = _start(tmp_path, state, output)
        try:
            until_sync(lambda: _worker_ready(state), "the worker to be ready", limit=30)
            _fill(disk)
            (state / ".space-for-result").unlink(missing_ok=True)
            with open(disk / "filler", "ab", buffering=0) as more:
                _fill_with(more)
            (tmp_path / "release").touch()
            process.wait(timeout=60)
        finally:
            end(process)
        text = output.read_text(errors="replace")
        _check_run_ended_as_its_worker(tmp_path, process, text)
        result = json.loads(re.search(r"ddsup: result\.json: (.*)", text)[1])  # type: ignore[index]
        assert (result["status"], result["exit_code"]) == ("worker_failed", WORKER_STATUS)
        said = ddsup("status", "--state-dir", str(state))
        assert said.returncode == 0, said.stderr
        assert "no result.json: its state directory is full" in said.stdout, said.stdout
        assert "killed?" not in said.stdout


def test_a_full_disk_under_ddsup_s_own_output_too(tmp_path: Path) -> None:
    """``slurm-JOBID.out`` beside the state dir: the console fails too; the status holds."""
    with _tmpfs(tmp_path / "disk") as disk:
        state, output = disk / "state", disk / "output"
        process = _start(tmp_path, state, output)
        try:
            until_sync(lambda: _worker_ready(state), "the worker to be ready", limit=30)
            _fill(disk)
            (tmp_path / "release").touch()
            process.wait(timeout=60)
        finally:
            end(process)
        _check_run_ended_as_its_worker(tmp_path, process, output.read_text(errors="replace"))


def test_a_read_only_state_dir(tmp_path: Path) -> None:
    with _tmpfs(tmp_path / "disk") as disk:
        state = disk / "state"
        state.mkdir(mode=0o700)
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        output = tmp_path / "output"
        process = _start(tmp_path, state, output)
        (tmp_path / "release").touch()
        try:
            process.wait(timeout=60)
        finally:
            end(process)
        text = output.read_text(errors="replace")
        _check_run_ended_as_its_worker(tmp_path, process, text)
        assert len(re.findall("warning: cannot write", text)) == 1, text
        assert "Read-only file system" in text
        result = json.loads(re.search(r"ddsup: result\.json: (.*)", text)[1])  # type: ignore[index]
        assert result["exit_code"] == WORKER_STATUS
        assert os.listdir(state) == []


def test_a_killed_attempt_s_space_for_the_result_makes_room_for_the_next(tmp_path: Path) -> None:
    """On a disk full since an attempt was killed, the next one moves that attempt's
    record aside in the space it kept for its result, starts, and writes its own result."""
    with _ext4(tmp_path / "disk", tmp_path / "disk.img") as disk:
        path = disk / "state"
        state, _ = begin_attempt(path)
        state.save_json(state.run, RunInfo(invocation_id="killed").to_json())
        state.close()  # killed: no result.json, and its space for one left behind
        _fill(disk)

        state, attempt = begin_attempt(path)
        assert attempt == 1
        assert json.loads((path / "attempts" / "0" / "run.json").read_text())["invocation_id"] == (
            "killed"
        )
        with open(disk / "filler", "ab", buffering=0) as more:
            _fill_with(more)
        assert state.release_reserve()
        state.write_json(state.result, {"status": "ok", "exit_code": 0})
        state.close()
        assert json.loads((path / "result.json").read_text())["exit_code"] == 0


@pytest.mark.parametrize("cut", [1, 7, 30, -2])
def test_status_and_logs_read_a_run_whose_last_event_is_torn(tmp_path: Path, cut: int) -> None:
    """The torn last line of a killed run's events.jsonl is skipped, whatever the cut."""
    state = tmp_path / "state"
    units = release_units(tmp_path / "units", tmp_path / "release")
    (tmp_path / "release").touch()
    done = subprocess.run(
        start_argv(units, state, *simulated(2, 1)), env=start_env(), capture_output=True, timeout=60
    )
    assert done.returncode == WORKER_STATUS
    data = (state / "events.jsonl").read_bytes()
    last = data[:-1].rfind(b"\n") + 1
    (state / "events.jsonl").write_bytes(data[: last + cut] if cut > 0 else data[:cut])
    (state / "result.json").unlink()
    status = ddsup("status", "--state-dir", str(state))
    assert status.returncode == 0 and "Traceback" not in status.stderr, status.stderr
    logs = ddsup("logs", "--state-dir", str(state), "--since", "1h", "worker")
    assert logs.returncode == 0 and "Traceback" not in logs.stderr, logs.stderr
