"""Unit files with fixed ports, run where no private network namespace can be made.

The example units fix their ports as users write them: lanes from 8000 up, the
endpoint's 9000, rendezvous ports from 9001 (1000 above the lanes'). Tests run them
unchanged in a network namespace of their own (``support.netns``), where nothing else
can hold those ports. Where the kernel refuses one (no root, no user namespaces), a
test runs the units with every fixed port moved by one offset to a block that is free
here, rather than skipping: the same run, on other numbers.
"""

from __future__ import annotations

import random
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from support.netns import SCRIPT, UNAVAILABLE
from support.ports import LOWEST, ephemeral_first

EXAMPLE_BASE = 8000  # the lowest fixed port of the examples
# Offsets from EXAMPLE_BASE that a moved run may use: up to 32 lane processes on one
# address (4 nodes of 8 GPUs), then the endpoint (+1000) and the rendezvous ports above it.
OFFSETS = (*range(32), *range(1000, 1032))
_PORT_LINE = re.compile(r"^(\s*port\s*=\s*)(\d+)\b", re.M)


def netns_available() -> bool:
    """Whether ``support.netns`` can make a private network namespace here."""
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "true"], capture_output=True, text=True, timeout=30
    )
    if done.returncode == UNAVAILABLE and "netns:" in done.stderr:
        return False
    assert done.returncode == 0, done.stderr
    return True


def free_base() -> int:
    """A base port ``P`` such that ``P + o`` is free for every offset ``o`` in OFFSETS,
    below the kernel's ephemeral range (see ``support.ports.free_port``); drawn at
    random, so that two suites on one machine rarely try the same block."""
    first = ephemeral_first()
    for base in random.sample(range(LOWEST, first - OFFSETS[-1]), 50):
        if all(_free(base + offset) for offset in OFFSETS):
            return base
    raise RuntimeError(f"no free block of ports between {LOWEST} and {first} in 50 tries")


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def move_ports(directory: Path, base: int) -> None:
    """Move every fixed ``port = N`` in the unit files under ``directory`` to
    ``N - EXAMPLE_BASE + base``."""
    for path in sorted(directory.rglob("*.toml")):
        text = path.read_text(encoding="utf-8")
        moved = _PORT_LINE.sub(lambda m: f"{m[1]}{int(m[2]) - EXAMPLE_BASE + base}", text)
        path.write_text(moved, encoding="utf-8")


def moved_copy(source: Path, target: Path, base: int) -> Path:
    """A copy of the tree ``source`` at ``target``, the ports of its units moved to
    ``base`` (copy the examples whole: a worker may run ``{unit_dir}/../rehearsal/…``)."""
    shutil.copytree(source, target)
    move_ports(target, base)
    return target
