"""The real-vLLM tier: these tests run the CPU build of vLLM as ddsup's lanes.

They need ``.venv-vllm`` (``scripts/setup-vllm``). Without it they skip; in CI
(``CI=true``) a skip fails (``support.ci``): a skipped tier would hide a broken set-up.
"""

from __future__ import annotations

import faulthandler

import pytest

from support.vllm import VllmInstall, installed_vllm


@pytest.fixture(scope="session")
def real_vllm() -> VllmInstall:
    found = installed_vllm()
    if isinstance(found, str):
        pytest.skip(found)
    return found


FIGURES = pytest.StashKey[list[str]]()


@pytest.fixture(autouse=True)
def _no_stack_dump_mid_run() -> None:
    """The suite's ``faulthandler_timeout`` dumps every thread's stack after 300 s, to show
    a hang; a scenario here loads vLLM for minutes, so that dump would come in the middle
    of a healthy run. A test that hangs still dumps them: at its own timeout mark
    (pytest-timeout)."""
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> list[str]:
    """Lines of measured figures, printed at the end of the session (a scenario appends
    what it measured: time until a lane is back, requests failed, processes left, stop
    times)."""
    return request.config.stash.setdefault(FIGURES, [])


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    lines = terminalreporter.config.stash.get(FIGURES, [])
    if lines:
        terminalreporter.write_sep("-", "real vLLM: figures")
        for line in lines:
            terminalreporter.write_line(f"vllm: {line}")
