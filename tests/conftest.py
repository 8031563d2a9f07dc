"""Suite-wide guards: every test that starts processes must end them.

After each test, no child of the test process may be alive and no process started by
this test session may carry a ``DDSUP_INVOCATION_ID``: ddsup's promise is that nothing
outlives it, and the tests hold themselves to the same rule. Processes of this session
are told apart from other runs on the machine by ``DDSUP_TEST_SESSION``, which every
process started from the tests inherits.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

TEST_SESSION = os.environ.setdefault("DDSUP_TEST_SESSION", uuid.uuid4().hex)
_MARK = f"DDSUP_TEST_SESSION={TEST_SESSION}".encode()


def ddsup_processes() -> dict[int, str]:
    """PID → invocation id of live processes of this test session that carry one."""
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if stat.rsplit(")", 1)[-1].split()[0] == "Z":
            continue  # a zombie is dead; its parent's reaping is checked separately
        items = environ.split(b"\0")
        if _MARK not in items:
            continue
        for item in items:
            if item.startswith(b"DDSUP_INVOCATION_ID="):
                found[int(entry.name)] = item.split(b"=", 1)[1].decode(errors="replace")
    return found


_BEFORE_SESSION: set[int] = set()


def pytest_sessionstart(session: pytest.Session) -> None:
    _BEFORE_SESSION.update(ddsup_processes())


def _last_pid() -> int:
    """The PID the kernel assigned most recently (last field of /proc/loadavg)."""
    return int(Path("/proc/loadavg").read_text().split()[-1])


@pytest.fixture(autouse=True)
def _no_leftover_processes() -> Iterator[None]:
    before = _last_pid()
    yield
    me = psutil.Process(os.getpid())
    if _last_pid() == before and not me.children():
        return  # no process was created anywhere during the test: nothing can be left
    deadline = time.monotonic() + 10.0
    while True:
        children = [c for c in me.children(recursive=True) if _alive(c)]
        strays = {p: i for p, i in ddsup_processes().items() if p not in _BEFORE_SESSION}
        if not children and not strays:
            return
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)  # processes being reaped right now: poll briefly, bounded
    for child in children:
        child.kill()
    for pid in strays:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)
    pytest.fail(
        f"test left processes behind: children={[c.pid for c in children]} "
        f"ddsup-run processes={sorted(strays)}"
    )


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
