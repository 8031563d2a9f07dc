"""Helpers for the operator-command tests: a small two-model unit dir, ``ddsup start`` as a
real subprocess on two simulated nodes, the ``ddsup`` CLI, and a pseudo-terminal.

Units are cheap (``sh``/``sleep``/``python3 -c``), so a whole live run with four lanes on
two nodes is ready in about a second of ddsup's own work.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from support.polls import until_sync
from support.runs import PY, end, simulated, start_env, start_process

SECRET = "s3cret-Value-0f-the-unit-environment-7d41"
LANES = ("alpha@0", "alpha@1", "beta@0", "beta@1")  # alpha@ on node0, beta@ on node1

# Prints the SHA-256 of $SECRET_TOKEN (proof that the unit got it, without the value).
_HASH_SECRET = (
    "import hashlib, os, sys, time; "
    "print('token', hashlib.sha256(os.environ['SECRET_TOKEN'].encode()).hexdigest(), flush=True); "
    "print('hello from', sys.argv[1], flush=True); time.sleep(300)"
)

UNITS = {
    "alpha@.toml": f"""
[unit]
type = "lane"
[service]
exec = ["python3", "-c", {json.dumps(_HASH_SECRET)}, "{{instance}}"]
environment = {{ SECRET_TOKEN = "{SECRET}" }}
[ready]
exec = ["true"]
interval = "100ms"
[lane]
model = "ma"
gpus = 1
replicas = 2
port = "auto"
stagger = "0s"
""",
    "beta@.toml": """
[unit]
type = "lane"
[service]
exec = ["sh", "-c", "echo beta line one {instance}; echo beta line two {instance}; exec sleep 300"]
[lane]
model = "mb"
gpus = 1
replicas = "auto"
port = "auto"
stagger = "0s"
""",
    "flaky.toml": f"""
[unit]
type = "service"
[service]
exec = ["sh", "-c", "echo flaky; exit 3"]
environment = {{ FLAKY_SECRET = "{SECRET}" }}
restart = "on-failure"
restart_sec = "50ms"
start_limit_burst = 2
on_failure = "continue"
""",
}


def write_units(path: Path, extra: dict[str, str] | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for name, text in {**UNITS, **(extra or {})}.items():
        (path / name).write_text(text)
    return path


def env() -> dict[str, str]:
    return start_env()


def ddsup(
    *args: str, cwd: Path | None = None, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    """Run the ddsup CLI to its end, output captured (so stdout is not a terminal)."""
    return subprocess.run(
        [PY, "-m", "ddsup", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env(),
        cwd=cwd,
        check=False,
    )


def events(state: Path) -> list[dict[str, Any]]:
    path = state / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def wait_for(condition: Callable[[], object], what: str, limit: float = 30.0) -> None:
    """Poll an external condition (files written by other processes), bounded."""
    until_sync(condition, what, limit=limit)


def ready(state: Path, instances: Sequence[str]) -> bool:
    last: dict[str, str] = {}
    for event in events(state):
        if event.get("event") == "unit":
            last[event["instance"]] = event["to"]
    return all(last.get(i) == "ready" for i in instances) and last.get("flaky") == "failed"


@dataclass
class LiveRun:
    """A ``ddsup start`` subprocess on two simulated nodes with two GPUs each."""

    units: Path
    state: Path
    process: subprocess.Popen[bytes]
    output: Path
    extra: list[str] = field(default_factory=list)

    def text(self) -> str:
        return self.output.read_text(errors="replace")

    def wait(self, limit: float = 30.0) -> int:
        return self.process.wait(timeout=limit)


@contextlib.contextmanager
def live_run(tmp: Path, *, state_name: str = "state") -> Iterator[LiveRun]:
    """Start a run (output to a file: not a terminal); always end it on the way out."""
    units = write_units(tmp / "units")
    state = tmp / state_name
    output = tmp / "start.out"
    with output.open("wb") as sink:
        process = start_process(units, state, *simulated(2, 2), output=sink, cwd=tmp)
    run = LiveRun(units, state, process, output)
    try:
        wait_for(lambda: ready(state, LANES) or process.poll() is not None, "lanes ready")
        assert process.poll() is None, run.text()
        yield run
    finally:
        end(process)


@contextlib.contextmanager
def on_pty(argv: Sequence[str], cwd: Path) -> Iterator[tuple[subprocess.Popen[bytes], PtyReader]]:
    """``argv`` with stdout and stderr on a pseudo-terminal (a person's terminal)."""
    master, slave = os.openpty()
    os.set_blocking(master, False)
    process = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
        env={**env(), "TERM": "xterm"},
        cwd=cwd,
    )
    os.close(slave)
    try:
        yield process, PtyReader(master)
    finally:
        end(process)
        os.close(master)


class PtyReader:
    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.data = b""

    def read_until(self, needle: bytes, limit: float = 30.0) -> bytes:
        deadline = time.monotonic() + limit
        while needle not in self.data:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"{needle!r} not seen on the terminal; got {self.data!r}")
            if not self._read(remaining):
                raise AssertionError(f"terminal closed before {needle!r}; got {self.data!r}")
        return self.data

    def read_to_end(self, limit: float = 30.0) -> bytes:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline and self._read(deadline - time.monotonic()):
            pass
        return self.data

    def _read(self, timeout: float) -> bool:
        readable, _, _ = select.select([self.fd], [], [], timeout)
        if not readable:
            return True
        try:
            chunk = os.read(self.fd, 65536)
        except OSError:  # EIO: every writer has closed the terminal
            return False
        self.data += chunk
        return bool(chunk)
