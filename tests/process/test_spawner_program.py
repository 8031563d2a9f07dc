"""The spawner program on its own (``ddsup.process._spawner_program``): what it says and
how it ends, whoever is on the other end of its socket. Its clones into units' cgroups,
as a containment uses them, are tested in ``test_containment.py``."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from ddsup.process import _spawner_program

PROGRAM = [sys.executable, "-I", "-S", _spawner_program.__file__]


def _start(cgroup: Path) -> tuple[subprocess.Popen[bytes], socket.socket]:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with theirs:
        process = subprocess.Popen(
            [*PROGRAM, str(theirs.fileno()), str(cgroup)],
            pass_fds=(theirs.fileno(),),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
    return process, ours


def test_it_ends_quietly_when_its_supervisor_is_gone_before_it_spoke(tmp_path: Path) -> None:
    """A supervisor that ends right after its first unit did closes the socket before the
    spawner has said whether it can clone: the spawner ends, and says nothing on the
    supervisor's console (no traceback of a broken pipe)."""
    process, ours = _start(tmp_path)
    ours.close()
    out, err = process.communicate(timeout=30)
    assert (process.returncode, out, err) == (0, b"", b"")


def test_it_says_why_it_cannot_clone_into_a_cgroup(tmp_path: Path) -> None:
    """Where a clone into a cgroup is refused (here the directory is no cgroup at all),
    it says so with the errno and ends: the supervisor keeps forking by the move."""
    process, ours = _start(tmp_path)
    with ours:
        line = ours.makefile("rb").readline()
    out, err = process.communicate(timeout=30)
    assert line.startswith(b"no ") and line.split()[1].isdigit(), line
    assert (process.returncode, out, err) == (0, b"", b"")


def test_it_refuses_to_run_without_its_socket_and_cgroup() -> None:
    done = subprocess.run(PROGRAM, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert "started by ddsup" in done.stderr
