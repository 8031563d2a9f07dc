"""``ddsup start`` as a real subprocess: to its end, in the background, or on its own.

Every test that runs a deployment builds its command line and environment here, and
reads what the run leaves in its state directory (``result.json``, ``events.jsonl``)
through :class:`Run`. The environment is the test's own without Slurm's, GPU hints or
ddsup's variables, except ``DDSUP_TEST_SESSION`` (the suite's mark on every process it
starts, which the leftover check in ``tests/conftest.py`` looks for).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import trio

from support.polls import until

PY = sys.executable
Units = Path | os.PathLike[str]  # a directory of unit files (``UnitDir`` is one)


def simulated(nodes: int = 2, gpus: int = 2) -> tuple[str, ...]:
    """Flags for ``nodes`` simulated nodes with ``gpus`` GPUs each (the local launcher)."""
    return ("--nodes", str(nodes), "--gpus-per-node", str(gpus))


def start_argv(units: Units, state: Path, *extra: str, verbose: bool = True) -> list[str]:
    argv = [PY, "-m", "ddsup", "start", os.fspath(units), "--state-dir", str(state)]
    return argv + (["-v"] if verbose else []) + list(extra)


def start_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "DDSUP_"))}
    env["DDSUP_TEST_SESSION"] = os.environ["DDSUP_TEST_SESSION"]
    for name in ("CUDA_VISIBLE_DEVICES", "NO_COLOR"):
        env.pop(name, None)
    env.update(extra or {})
    return env


def read_events(state: Path, *, live: bool = False) -> list[dict[str, Any]]:
    """Every line of events.jsonl, checked to be one JSON object with time and event.

    ``live``: the run is still writing it, so a last line without its newline is one
    being written (a read may see part of a write: CI saw one) and is left for the next
    read. Of a finished run every line must be whole, the last one too."""
    path = state / "events.jsonl"
    if not path.exists():
        return []
    lines = path.read_text().split("\n")
    last = lines.pop()  # "" after the last newline
    if last and not live:
        lines.append(last)  # fails below: a torn line in a finished run's events
    events = []
    for number, line in enumerate(lines, 1):
        event = json.loads(line)
        assert isinstance(event, dict), f"events.jsonl:{number} is not an object"
        assert isinstance(event.get("time"), float), f"events.jsonl:{number}: no float time"
        assert isinstance(event.get("event"), str), f"events.jsonl:{number}: no event name"
        events.append(event)
    return events


@dataclass
class Run:
    """A finished (or running) ``ddsup start`` and its state directory."""

    state: Path
    returncode: int | None = None
    output: str = ""

    def result(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.state / "result.json").read_text())
        return data

    def events(self, *, live: bool = False) -> list[dict[str, Any]]:
        return read_events(self.state, live=live)

    def transitions(self, instance: str, to: str | None = None) -> list[dict[str, Any]]:
        return [
            e
            for e in self.events()
            if e["event"] == "unit" and e.get("instance") == instance and to in (None, e["to"])
        ]

    def times(self, instance: str, to: str) -> list[float]:
        return [e["time"] for e in self.transitions(instance, to)]

    def describe(self) -> str:
        return f"exit {self.returncode}; output:\n{self.output}"


async def run_start(
    units: Units,
    state: Path,
    *extra: str,
    env: Mapping[str, str] | None = None,
    limit: float = 30.0,
) -> Run:
    """Run ``ddsup start`` to its end (at most ``limit`` seconds) and return the run."""
    with trio.fail_after(limit):
        done = await trio.run_process(
            start_argv(units, state, *extra),
            env=start_env(env),
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    output = done.stdout.decode(errors="replace") + done.stderr.decode(errors="replace")
    return Run(state, done.returncode, output)


@dataclass
class Running:
    """A ``ddsup start`` still running: signal it, wait for its events, wait for its end."""

    process: trio.Process
    run: Run
    log: Path | None = None  # where its output goes

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    async def wait_for(
        self, predicate: Callable[[list[dict[str, Any]]], bool], limit: float = 15.0
    ) -> list[dict[str, Any]]:
        """Until the run's events satisfy ``predicate`` (a file: a bounded poll)."""

        def satisfied() -> list[dict[str, Any]] | None:
            if self.process.poll() is not None:
                said = self.log.read_text(errors="replace")[-3000:] if self.log else ""
                code = self.process.returncode
                raise AssertionError(f"ddsup start ended early ({code}); it said:\n{said}")
            events = self.run.events(live=True)
            return events if predicate(events) else None

        return await until(satisfied, "the run's events", limit=limit)

    async def wait_ready(self, *instances: str, limit: float = 15.0) -> list[dict[str, Any]]:
        def all_ready(events: list[dict[str, Any]]) -> bool:
            ready = {e.get("instance") for e in events if e.get("to") == "ready"}
            return set(instances) <= ready

        return await self.wait_for(all_ready, limit)

    async def wait(self, limit: float = 30.0) -> Run:
        with trio.fail_after(limit):
            self.run.returncode = await self.process.wait()
        return self.run


@asynccontextmanager
async def running(
    units: Units, state: Path, *extra: str, env: Mapping[str, str] | None = None
) -> AsyncIterator[Running]:
    """``ddsup start`` in the background; whatever happens, it is ended and reaped."""
    log = state.parent / f"{state.name}.output"
    with log.open("wb") as output:
        process = await trio.lowlevel.open_process(
            start_argv(units, state, *extra), env=start_env(env), stdout=output, stderr=output
        )
    handle = Running(process, Run(state), log)
    try:
        yield handle
    finally:
        with trio.CancelScope(shield=True):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                with trio.move_on_after(15):
                    await process.wait()
            if process.poll() is None:
                process.kill()  # its sentinel sweeps the units
                await process.wait()
        handle.run.output = log.read_text(errors="replace")


def start_process(
    units: Units,
    state: Path,
    *extra: str,
    output: TextIO | int,
    cwd: Path | None = None,
    verbose: bool = False,
) -> subprocess.Popen[bytes]:
    """``ddsup start`` as a plain subprocess, for synchronous tests (stdin closed)."""
    return subprocess.Popen(
        start_argv(units, state, *extra, verbose=verbose),
        stdin=subprocess.DEVNULL,
        stdout=output,
        stderr=subprocess.STDOUT,
        env=start_env(),
        cwd=cwd,
    )


def end(process: subprocess.Popen[Any], limit: float = 20.0) -> None:
    """SIGTERM, then (after ``limit`` seconds) SIGKILL; always reaped."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
