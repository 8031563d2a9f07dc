"""A child started with ``subprocess`` before trio ran (``ddsup start``'s agents), adopted.

``adopt`` must give the same exit statuses as a child that ``spawn`` started, reap the
child (no zombie is left), and wait by an event: a pidfd, or a thread in ``waitid`` where
the kernel has no pidfds. These run real children; none is awaited by sleeping.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
from pathlib import Path

import pytest
import trio
from process_helpers import SLEEP, py

from ddsup.process import ExitStatus, adopt
from ddsup.process._adopted import AdoptedProcess


def popen(code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(py(code), stdin=subprocess.DEVNULL, start_new_session=True)


def reaped(pid: int) -> bool:
    """No zombie of ``pid`` is left for us to reap."""
    try:
        return os.waitpid(pid, os.WNOHANG) == (0, 0) and not Path(f"/proc/{pid}").exists()
    except ChildProcessError:
        return True


@pytest.fixture(params=["pidfd", "thread"])
def kernel(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways of waiting: a kernel with pidfds, and one without (ENOSYS)."""
    if request.param == "thread":

        def no_pidfds(pid: int, flags: int = 0) -> int:
            raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))

        monkeypatch.setattr(os, "pidfd_open", no_pidfds)
    return str(request.param)


@pytest.mark.parametrize("code", [0, 3, 77])
async def test_an_adopted_child_exit_status_and_reaping(code: int, kernel: str) -> None:
    child = adopt(popen(f"import sys; sys.exit({code})"), dict(os.environ))
    assert await child.wait() == ExitStatus(code=code)
    assert reaped(child.pid)


async def test_an_adopted_child_killed_while_awaited(kernel: str) -> None:
    child = adopt(popen(SLEEP), dict(os.environ))
    statuses: list[ExitStatus] = []

    async def waiter() -> None:
        statuses.append(await child.wait())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        assert child.status is None  # still running: the waiter is parked, not polling
        os.kill(child.pid, signal.SIGTERM)
    assert statuses == [ExitStatus(signal=signal.SIGTERM)]
    assert reaped(child.pid)


async def test_a_poll_that_reaps_while_a_wait_is_parked() -> None:
    """``status`` (a poll) may reap the child while another task waits on its pidfd."""
    process = AdoptedProcess(popen(SLEEP))
    results: list[int] = []

    async def waiter() -> None:
        results.append(await process.wait())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        os.kill(process.pid, signal.SIGKILL)
        # blocks only until the SIGKILL lands; reaps nothing (WNOWAIT), the waiter stays parked
        os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT)  # noqa: ASYNC222
        assert process.poll() == -signal.SIGKILL  # reaps, and closes the pidfd
    assert results == [-signal.SIGKILL]
    assert reaped(process.pid)


async def test_cancelling_a_wait_leaves_the_child_to_a_later_wait(kernel: str) -> None:
    process = AdoptedProcess(popen(SLEEP))
    with trio.move_on_after(0.05):
        await process.wait()
    assert process.poll() is None
    process_group = os.getpgid(process.pid)
    os.killpg(process_group, signal.SIGKILL)
    assert await process.wait() == -signal.SIGKILL
    assert reaped(process.pid)
