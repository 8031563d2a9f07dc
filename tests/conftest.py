"""Suite-wide guards: every test that starts processes must end them.

After each test, no child of the test process may be alive and no process started by
this test session may carry a ``DDSUP_INVOCATION_ID``: ddsup's promise is that nothing
outlives it, and the tests hold themselves to the same rule. Processes of this session
are told apart from other runs on the machine by ``DDSUP_TEST_SESSION``, which every
process started from the tests inherits.

And in CI (``CI=true``) no test may skip unless the reviewed list ``tests/ci_skips.toml``
says why it may (the plugin ``support.ci``).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator

import psutil
import pytest

from support import procs
from support.polls import until_sync

# Under CI=true a skip fails unless tests/ci_skips.toml allows it (see support/ci.py).
pytest_plugins = ("support.ci",)

TEST_SESSION = os.environ.setdefault("DDSUP_TEST_SESSION", uuid.uuid4().hex)


def pytest_addoption(parser: pytest.Parser) -> None:
    """The chaos suite's options (tests/chaos/conftest.py), here so that they exist
    whatever part of the suite pytest is pointed at."""
    group = parser.getgroup("chaos", "ddsup chaos schedules")
    group.addoption(
        "--chaos-runs",
        type=int,
        default=None,
        help="schedules to run (default $DDSUP_CHAOS_RUNS, else 50)",
    )
    group.addoption(
        "--chaos-seed",
        type=int,
        default=None,
        help="seed of the schedules (default $DDSUP_CHAOS_SEED, else new in CI, else 1)",
    )
    group.addoption(
        "--chaos-only",
        type=int,
        action="append",
        default=None,
        metavar="I",
        help="run only schedule I of the seed (repeatable)",
    )


def ddsup_processes() -> dict[int, str]:
    """PID → invocation id of live processes of this test session that carry one."""
    found: dict[int, str] = {}
    for pid in procs.carrying("DDSUP_TEST_SESSION", TEST_SESSION):
        invocation = procs.environ(pid).get(b"DDSUP_INVOCATION_ID")
        if invocation is not None:
            found[pid] = invocation.decode(errors="replace")
    return found


_BEFORE_SESSION: set[int] = set()


def pytest_sessionstart(session: pytest.Session) -> None:
    _BEFORE_SESSION.update(ddsup_processes())


@pytest.fixture(scope="session")
def kept_sessions() -> set[int]:
    """Process sessions that a module-scoped fixture owns across its tests (a server
    slow to start, shared by a module): the guard below leaves them to that fixture,
    which ends them (its session id is its leader's PID) when its last test is over."""
    return set()


@pytest.fixture(autouse=True)
def _no_leftover_processes(kept_sessions: set[int]) -> Iterator[None]:
    before = procs.last_pid()
    yield
    me = psutil.Process(os.getpid())
    if procs.last_pid() == before and not me.children():
        return  # no process was created anywhere during the test: nothing can be left

    def leftovers() -> tuple[list[psutil.Process], dict[int, str]]:
        children = [
            c for c in me.children(recursive=True) if _alive(c) and _sid(c) not in kept_sessions
        ]
        strays = {p: i for p, i in ddsup_processes().items() if p not in _BEFORE_SESSION}
        return children, strays

    try:  # processes being reaped right now get a moment
        until_sync(lambda: leftovers() == ([], {}), "the test's processes to end", limit=10.0)
        return
    except AssertionError:
        children, strays = leftovers()
    if not children and not strays:
        return  # gone just now
    for child in children:
        child.kill()
    for pid in strays:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)
    pytest.fail(
        f"test left processes behind: children={[c.pid for c in children]} "
        f"ddsup-run processes={sorted(strays)}"
    )


def _sid(proc: psutil.Process) -> int | None:
    try:
        return os.getsid(proc.pid)
    except OSError:
        return None


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
