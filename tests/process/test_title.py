"""A process's command line rewritten in place (``process._title``), its environment kept.

The oracle is the kernel's view, ``/proc/PID/cmdline`` and ``/proc/PID/environ`` of a
real child read by this test, not anything the child says about itself.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = """
import sys
from ddsup.process._title import retitle
words = sys.argv[1].split() if sys.argv[1] != "longer" else ["w" * 100_000]
print(retitle(words), flush=True)
sys.stdin.read()
"""
MARK = "DDSUP_TITLE_TEST_MARK"


def _retitled(words: str, *padding: str) -> tuple[str, list[bytes], bytes]:
    """(what retitle said, the child's cmdline words, its environ) while it waits."""
    env = {**os.environ, MARK: "kept"}
    with subprocess.Popen(
        [sys.executable, "-c", CHILD, words, *padding],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    ) as child:
        assert child.stdout is not None and child.stdin is not None
        said = child.stdout.readline().decode().strip()
        cmdline = Path(f"/proc/{child.pid}/cmdline").read_bytes().split(b"\0")
        environ = Path(f"/proc/{child.pid}/environ").read_bytes()
        child.stdin.close()
    return said, cmdline, environ


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc: Linux")
def test_words_that_fit_are_the_command_line_and_the_environment_is_untouched() -> None:
    said, cmdline, environ = _retitled("python -m ddsup agent --node n7", "x" * 40)
    assert said == "True"
    assert [w for w in cmdline if w] == [b"python", b"-m", b"ddsup", b"agent", b"--node", b"n7"]
    assert f"{MARK}=kept".encode() in environ.split(b"\0")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc: Linux")
def test_words_that_do_not_fit_leave_the_command_line_as_it_was() -> None:
    said, cmdline, environ = _retitled("longer")
    assert said == "False"
    assert cmdline[1:4] == [b"-c", CHILD.encode(), b"longer"]
    assert f"{MARK}=kept".encode() in environ.split(b"\0")
