"""One child process: exit statuses, logs, stdin, groups, stop and the one-owner form."""

from __future__ import annotations

import os
import signal
import stat
import threading
from pathlib import Path

import pytest
import trio
from process_helpers import SETSID_PARENT, SLEEP, alive, py, reporter, run_env, wait_gone
from trio._core import _thread_cache

from ddsup._errors import DdsupError
from ddsup.process import ChildProcess, ExitStatus, SpawnError, spawn, supervised


async def start(
    code: str, log_path: Path, *args: str, env: dict[str, str] | None = None
) -> ChildProcess:
    return await spawn(py(code, *args), env=env or dict(os.environ), cwd=".", log_path=log_path)


@pytest.mark.parametrize("code", [0, 1, 3, 77, 255])
async def test_exit_codes_pass_through(code: int, log_path: Path) -> None:
    child = await start(f"import sys; sys.exit({code})", log_path)
    status = await child.wait()
    assert status == ExitStatus(code=code)
    assert status.is_success(frozenset({0})) is (code == 0)
    assert status.describe() == f"exit status {code}"
    assert status.to_json() == {"code": code}


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGSEGV])
async def test_signal_is_reported(sig: signal.Signals, log_path: Path) -> None:
    code = f"import os; os.kill(os.getpid(), {int(sig)})"
    child = await start(code, log_path)
    status = await child.wait()
    assert status == ExitStatus(signal=sig)
    assert status.describe() == f"killed by {sig.name}"
    assert status.to_json() == {"signal": sig.name}
    assert not status.is_success(frozenset({0}))


async def test_wait_repeated_and_concurrent_gives_one_status(log_path: Path) -> None:
    child = await start("import sys; sys.stdin.read(); sys.exit(9)", log_path)
    results: list[ExitStatus] = []
    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(lambda: _collect(child, results))
    assert results == [ExitStatus(code=9)] * 3
    assert await child.wait() == ExitStatus(code=9)
    assert child.status == child.returncode == ExitStatus(code=9)


async def _collect(child: ChildProcess, results: list[ExitStatus]) -> None:
    results.append(await child.wait())


def test_exit_status_needs_exactly_one_field() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        ExitStatus()
    assert ExitStatus.from_returncode(-9) == ExitStatus(signal=9)


async def test_missing_binary_is_a_spawn_error_with_the_reason(log_path: Path) -> None:
    with pytest.raises(SpawnError) as info:
        await spawn(["ddsup-no-such-program"], env=dict(os.environ), cwd=".", log_path=log_path)
    assert isinstance(info.value, DdsupError)
    assert str(info.value) == (
        "cannot start 'ddsup-no-such-program': No such file or directory"
        " (argv[0] 'ddsup-no-such-program' not on PATH)"
    )


async def test_missing_working_directory_is_named(log_path: Path, tmp_path: Path) -> None:
    missing = tmp_path / "gone"
    with pytest.raises(SpawnError, match="working directory") as info:
        await spawn(py("pass"), env=dict(os.environ), cwd=missing, log_path=log_path)
    assert str(missing) in str(info.value)


async def test_not_executable_is_named(log_path: Path, tmp_path: Path) -> None:
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\n")
    with pytest.raises(SpawnError, match=r"Permission denied \(.* is not executable\)"):
        await spawn([str(script)], env=dict(os.environ), cwd=".", log_path=log_path)


async def test_missing_log_directory_is_a_spawn_error(tmp_path: Path) -> None:
    with pytest.raises(SpawnError, match="cannot open log file"):
        await spawn(py("pass"), env=dict(os.environ), cwd=".", log_path=tmp_path / "no" / "x.log")


async def test_fast_writer_loses_nothing_and_log_is_private(log_path: Path) -> None:
    await trio.Path(log_path).write_bytes(b"earlier run\n")
    os.chmod(log_path, 0o600)
    code = (
        "import os, sys\n"
        "block = b'o' * 65536\n"
        "for _ in range(320): os.write(1, block)\n"  # 20 MiB on stdout
        "os.write(2, b'E' * 1000)\n"
        "sys.exit(0)\n"
    )
    child = await start(code, log_path)
    assert await child.wait() == ExitStatus(code=0)
    data = await trio.Path(log_path).read_bytes()
    assert data.startswith(b"earlier run\n")  # appended, not truncated
    assert len(data) == len(b"earlier run\n") + 320 * 65536 + 1000
    assert data.count(b"E") == 1000


async def test_new_log_file_is_created_0600(log_path: Path) -> None:
    child = await start("print('hello'); import sys; print('oops', file=sys.stderr)", log_path)
    await child.wait()
    assert stat.S_IMODE((await trio.Path(log_path).stat()).st_mode) == 0o600
    assert (await trio.Path(log_path).read_text()).splitlines() == ["hello", "oops"]


async def test_stdin_is_dev_null(log_path: Path) -> None:
    code = "import os, sys; data = sys.stdin.buffer.read(); print(repr(data), os.path.realpath('/proc/self/fd/0'))"
    child = await start(code, log_path)
    assert await child.wait() == ExitStatus(code=0)
    assert (await trio.Path(log_path).read_text()).split() == ["b''", "/dev/null"]


async def test_child_leads_its_own_session_and_group(log_path: Path) -> None:
    async with supervised(py(SLEEP), env=dict(os.environ), cwd=".", log_path=log_path) as child:
        assert os.getpgid(child.pid) == child.pid
        assert os.getsid(child.pid) == child.pid
        assert os.getpgid(child.pid) != os.getpgrp()


async def test_stop_sends_kill_signal_first(log_path: Path) -> None:
    child = await start(SLEEP, log_path)
    status = await child.stop(signal.SIGTERM, timeout_stop=10.0)
    assert status == ExitStatus(signal=signal.SIGTERM)
    assert await child.stop(signal.SIGTERM, timeout_stop=10.0) == status  # idempotent


async def test_stop_sigkills_a_child_that_ignores_the_kill_signal(log_path: Path) -> None:
    async with reporter() as rep:
        code = (
            "import signal, socket, time\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            f"socket.create_connection(('127.0.0.1', {rep.port})).close()\n"
            "time.sleep(600)\n"
        )
        child = await start(code, log_path)
        await rep.receive()  # the handler is installed
    start_time = trio.current_time()
    status = await child.stop(signal.SIGTERM, timeout_stop=0.5)
    elapsed = trio.current_time() - start_time
    assert status == ExitStatus(signal=signal.SIGKILL)
    assert 0.45 <= elapsed < 3.0


@pytest.mark.parametrize("then", ["sleep", "exit"])
async def test_stop_kills_a_setsid_grandchild(
    then: str, log_path: Path, invocation_id: str
) -> None:
    """Escaped from the group; when its parent already exited, only the environment finds it."""
    async with reporter() as rep:
        child = await start(
            SETSID_PARENT, log_path, str(rep.port), then, env=run_env(invocation_id)
        )
        grandchild = int(await rep.receive())
    assert os.getsid(grandchild) == grandchild  # really left the child's session and group
    if then == "exit":
        assert await child.wait() == ExitStatus(code=0)
    await child.stop(signal.SIGTERM, timeout_stop=5.0)
    assert await wait_gone(grandchild, seconds=1.0)


async def test_stop_spares_processes_of_other_units(
    log_path: Path, invocation_id: str, tmp_path: Path
) -> None:
    env = run_env(invocation_id)
    other = await start(SLEEP, tmp_path / "other.log", env=run_env(invocation_id, unit="other"))
    sibling = await start(SLEEP, tmp_path / "sibling.log", env=env)  # same identity, managed
    child = await start(SLEEP, log_path, env=env)
    await child.stop(signal.SIGTERM, timeout_stop=5.0)
    assert alive(other.pid)
    assert alive(sibling.pid)
    await other.stop(signal.SIGTERM, 5.0)
    await sibling.stop(signal.SIGTERM, 5.0)


async def test_supervised_stops_the_child_when_cancelled(log_path: Path) -> None:
    with trio.move_on_after(0.2) as scope:
        async with supervised(py(SLEEP), env=dict(os.environ), cwd=".", log_path=log_path) as child:
            await trio.sleep_forever()
    assert scope.cancelled_caught
    assert child.status == ExitStatus(signal=signal.SIGTERM)


async def test_supervised_stops_the_child_when_the_block_raises(log_path: Path) -> None:
    with pytest.raises(KeyError):
        async with supervised(py(SLEEP), env=dict(os.environ), cwd=".", log_path=log_path) as child:
            raise KeyError("boom")
    assert child.status == ExitStatus(signal=signal.SIGTERM)


async def test_child_outlives_idle_worker_threads(
    log_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A unit outlives trio's worker threads, which exit once idle: nothing may tie its
    life to a thread of ours (``PR_SET_PDEATHSIG`` would, set in a child forked from a
    worker thread, as ``trio.lowlevel.open_process`` forks: it fires on the thread's
    exit; ``spawn`` forks on the event loop's thread). Worker threads idle out after
    0.1 s here instead of 10 s, and every one of them is waited for, so the condition
    under test (no worker thread of ours left alive) holds when the child is checked."""
    monkeypatch.setattr(_thread_cache, "IDLE_TIMEOUT", 0.1)
    async with supervised(py(SLEEP), env=dict(os.environ), cwd=".", log_path=log_path) as child:
        await trio.to_thread.run_sync(lambda: None)  # a worker thread ran, and idles out
        workers = [t for t in threading.enumerate() if t.name.startswith("Trio thread")]
        assert workers
        for worker in workers:
            worker.join(15)  # blocks the loop for ~0.1 s: nothing else runs in this test
            assert not worker.is_alive()
        # the absence of a death can only be watched for: a PDEATHSIG lands at once
        assert not await wait_gone(child.pid, 0.5)
        assert child.status is None
