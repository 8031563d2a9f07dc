"""The mark every process a bench starts carries, so that none outlives the bench.

Each process started through :func:`marked_process` has ``DDSUP_BENCH_MARK=<random>`` in
its environment, and so does everything it starts (units, their children, setsid
escapees that keep their environment). Once a measurement is over, every live process
with the mark is SIGKILLed and counted: a bench reports a leftover, it never leaves one.
Shared by ``scale_allocation.py`` and ``supervision.py`` (run from the repository root, as
``python bench/NAME.py``, this folder is on ``sys.path``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path

import psutil

MARK_VAR = "DDSUP_BENCH_MARK"
MARK = uuid.uuid4().hex


def marked_processes() -> list[psutil.Process]:
    """Live (non-zombie) processes of this bench: they carry ``MARK`` in their environment."""
    found = []
    for proc in psutil.process_iter():
        with suppress(psutil.Error):
            if proc.environ().get(MARK_VAR) == MARK and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
    return found


def kill_marked() -> int:
    """SIGKILL every live process of this bench; how many there were."""
    procs = marked_processes()
    for proc in procs:
        with suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(procs, timeout=5)
    return len(procs)


@contextmanager
def marked_process(
    argv: list[str],
    output: Path,
    *,
    stop_timeout: float,
    env: Mapping[str, str] | None = None,
    session: bool = False,
) -> Iterator[subprocess.Popen[bytes]]:
    """``argv`` started with the mark (output to ``output``); afterwards SIGTERM, SIGKILL
    after ``stop_timeout`` seconds, and every marked process left is killed and reported.

    ``session``: in a session of its own, as ``sbatch`` starts a job script. Linux's
    scheduler shares the CPU between sessions (autogroups) before it shares it between
    processes, so this keeps the bench's own busy threads out of the group of the
    process measured."""
    full_env = {**os.environ, **(env or {}), MARK_VAR: MARK}
    with output.open("wb") as out:
        process = subprocess.Popen(
            argv,
            stdout=out,
            stderr=out,
            stdin=subprocess.DEVNULL,
            env=full_env,
            start_new_session=session,
        )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=stop_timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        leftovers = kill_marked()
        if leftovers:
            print(
                f"LEFTOVER: killed {leftovers} processes still carrying the mark", file=sys.stderr
            )
