"""An unprivileged user against a root-owned run: typed errors, never a traceback.

``status``, ``stop`` and ``logs`` as another user, and ``start`` into a directory it
cannot write, must not end in PermissionError tracebacks. Here root runs a live run; the
second user (``second_user.py``: its own readable copy of ddsup, wherever the checkout
lies) tries every operator command on it and two starts that cannot have their state
directory. Each answers one ``ddsup: error:`` line with
its sysexits status (77 not yours, 73 cannot create), and root's run ends as it would
have.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hostile_helpers import WORKER_STATUS, release_units
from second_user import SecondUser, as_root_only

from support.polls import until_sync
from support.runs import end, read_events, simulated, start_argv, start_env

pytestmark = as_root_only


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory both root and the second user can traverse (tmp_path's parents are 0700)."""
    base = Path(tempfile.mkdtemp(prefix="ddsup-hostile-", dir="/tmp"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _one_error_line(done: subprocess.CompletedProcess[str], status: int, words: str) -> None:
    what = f"{done.args}: exit {done.returncode}\n{done.stdout}{done.stderr}"
    assert done.returncode == status, what
    assert "Traceback" not in done.stderr, what
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ddsup: error:"), what
    assert words in lines[0], what


def test_an_unprivileged_user_gets_typed_errors_from_a_root_run(
    shared: Path, second_user: SecondUser
) -> None:
    units = release_units(shared / "units", shared / "release")
    shared.joinpath("units").chmod(0o755)
    state = shared / "ddsup-1"
    with (shared / "output").open("wb") as out:
        process = subprocess.Popen(
            start_argv(units, state, *simulated(2, 1)), env=start_env(), stdout=out, stderr=out
        )
    try:
        until_sync(
            lambda: any(
                e.get("to") == "ready" and e.get("instance") == "worker"
                for e in read_events(state, live=True)
            ),
            "the worker to be ready",
            limit=30,
        )
        for command in (
            ["status"],
            ["status", "--json"],
            ["stop", "--no-wait"],
            ["logs", "worker"],
            ["report", "-o", "-"],
            ["cleanup"],
        ):
            done = second_user.ddsup(*command, "--state-dir", str(state))
            _one_error_line(done, 77, "belongs to uid 0, not to you")
        _one_error_line(second_user.ddsup("status", cwd=shared), 1, "no ddsup run of yours")
        for target in (state, shared / "new"):
            done = second_user.ddsup(
                "start", str(units.path), *simulated(2, 1), "--state-dir", str(target)
            )
            _one_error_line(done, 73, "state directory" if target != state else "not to you")
        (shared / "release").touch()
        assert process.wait(timeout=60) == WORKER_STATUS
    finally:
        end(process)
    result = json.loads((state / "result.json").read_text())
    assert (result["status"], result["exit_code"]) == ("worker_failed", WORKER_STATUS)
    assert not (shared / "new").exists()
