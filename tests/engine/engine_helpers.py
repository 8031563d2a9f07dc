"""Helpers for the engine tests: unit dirs written by the test, ``ddsup start`` as a real
subprocess, and readers for what a run leaves in its state directory.

Everything a test asserts comes from user-visible artefacts: the exit status of
``ddsup start``, ``result.json``, ``events.jsonl`` and files the units themselves write
(``stamp.py`` appends ``NAME MONOTONIC_NS`` lines, then execs the rest of its argv).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

PY = sys.executable

# Appends "NAME MONOTONIC_NS" to FILE (one write, O_APPEND), then execs the rest of argv
# (if any): units prove *when* they started with the clock every process shares.
STAMP_PY = """\
import os, sys, time
name, path, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
os.write(fd, f"{name} {time.monotonic_ns()}\\n".encode())
os.close(fd)
if rest:
    os.execvp(rest[0], rest)
"""

# Writes its environment as JSON to FILE atomically (readiness probes test for FILE).
ENV_DUMP_PY = """\
import json, os, sys
path = sys.argv[1]
tmp = path + ".tmp"
with open(tmp, "w") as handle:
    json.dump(dict(os.environ), handle)
os.replace(tmp, path)
if sys.argv[2:]:
    os.execvp(sys.argv[2], sys.argv[2:])
"""

# Ignores SIGTERM, says so in FILE (readiness is "FILE exists"), then sleeps forever.
TERM_IGNORER_PY = """\
import signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
open(sys.argv[1], "w").close()
while True:
    time.sleep(60)
"""

# Waits (bounded) until events.jsonl of its own run holds a matching unit transition,
# then exits 0: a worker that ends the run only after something has happened.
WAIT_EVENT_PY = """\
import json, os, sys, time
instance, to = sys.argv[1], sys.argv[2]
path = os.path.join(os.environ["DDSUP_STATE_DIR"], "events.jsonl")
deadline = time.monotonic() + 20
while time.monotonic() < deadline:
    with open(path) as handle:
        for line in handle:
            event = json.loads(line)
            if event.get("instance") == instance and event.get("to") == to:
                sys.exit(0)
    time.sleep(0.02)
sys.exit(99)
"""

HELPERS = {
    "stamp.py": STAMP_PY,
    "env_dump.py": ENV_DUMP_PY,
    "term_ignorer.py": TERM_IGNORER_PY,
    "wait_event.py": WAIT_EVENT_PY,
}


def toml_value(value: Any) -> str:
    """A TOML literal for str/int/list/dict (JSON strings are valid TOML basic strings)."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(value)


def unit_text(sections: Mapping[str, Mapping[str, Any]]) -> str:
    lines = []
    for section, keys in sections.items():
        lines.append(f"[{section}]")
        lines += [f"{key} = {toml_value(value)}" for key, value in keys.items()]
    return "\n".join(lines) + "\n"


class UnitDir:
    """A directory of unit files plus the helper scripts units run."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        for name, text in HELPERS.items():
            (path / name).write_text(text)

    def script(self, name: str) -> str:
        return str(self.path / name)

    def stamp(self, name: str, file: Path, *then: str) -> list[str]:
        """argv: append ``name monotonic_ns`` to ``file``, then exec ``then``."""
        return [PY, self.script("stamp.py"), name, str(file), *then]

    def add(self, name: str, type: str, exec: Sequence[str], **sections: Mapping[str, Any]) -> None:
        """Write ``name.toml``; ``unit``/``service`` keys merge with type and exec."""
        unit = {"type": type, **sections.pop("unit", {})}
        service = {"exec": list(exec), **sections.pop("service", {})}
        body = {"unit": unit, "service": service, **sections}
        (self.path / f"{name}.toml").write_text(unit_text(body))


@dataclass
class Run:
    """A finished (or running) ``ddsup start`` and its state directory."""

    state: Path
    returncode: int | None = None
    output: str = ""

    def result(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.state / "result.json").read_text())
        return data

    def events(self) -> list[dict[str, Any]]:
        return read_events(self.state)

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


def read_events(state: Path) -> list[dict[str, Any]]:
    """Every line of events.jsonl, checked to be one JSON object with time and event."""
    path = state / "events.jsonl"
    if not path.exists():
        return []
    events = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        event = json.loads(line)
        assert isinstance(event, dict), f"events.jsonl:{number} is not an object"
        assert isinstance(event.get("time"), float), f"events.jsonl:{number}: no float time"
        assert isinstance(event.get("event"), str), f"events.jsonl:{number}: no event name"
        events.append(event)
    return events


def start_argv(units: UnitDir | Path, state: Path, *extra: str) -> list[str]:
    path = units.path if isinstance(units, UnitDir) else units
    return [PY, "-m", "ddsup", "start", str(path), "--state-dir", str(state), "-v", *extra]


def start_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "DDSUP_"))}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env.update(extra or {})
    return env


async def run_start(
    units: UnitDir | Path,
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

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    async def wait_for(
        self, predicate: Callable[[list[dict[str, Any]]], bool], limit: float = 15.0
    ) -> list[dict[str, Any]]:
        """Until the run's events satisfy ``predicate`` (a bounded poll: a file has no event)."""
        with trio.fail_after(limit):
            while True:
                events = self.run.events()
                if predicate(events):
                    return events
                if self.process.poll() is not None:
                    raise AssertionError(f"ddsup start ended early ({self.process.returncode})")
                await trio.sleep(0.02)

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
    units: UnitDir, state: Path, *extra: str, env: Mapping[str, str] | None = None
) -> AsyncIterator[Running]:
    """``ddsup start`` in the background; whatever happens, it is ended and reaped."""
    log = state.parent / f"{state.name}.output"
    with log.open("wb") as output:
        process = await trio.lowlevel.open_process(
            start_argv(units, state, *extra), env=start_env(env), stdout=output, stderr=output
        )
    handle = Running(process, Run(state))
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


def stamps(path: Path) -> list[tuple[str, int]]:
    """The ``NAME MONOTONIC_NS`` lines units appended to ``path``, in file order."""
    if not path.exists():
        return []
    rows = [line.split() for line in path.read_text().splitlines()]
    return [(name, int(ns)) for name, ns in rows]


def first_stamp(path: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, ns in stamps(path):
        out.setdefault(name, ns)
    return out


def monotonic_ns() -> int:
    return time.monotonic_ns()
