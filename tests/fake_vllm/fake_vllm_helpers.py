"""Helpers of the fake-vllm tests: schemas, SSE parsing, lanes as subprocesses.

A module of its own (not conftest) so test modules can import it by name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import jsonschema  # type: ignore[import-untyped,unused-ignore]  # stubs optional
import trio

STARTUP_TIMEOUT = 15.0  # a cold interpreter on a loaded CI box
LISTENING = b"fake-vllm listening on http://127.0.0.1:"
_SCHEMAS = json.loads((Path(__file__).parent / "openai_schemas.json").read_text())


def validate(instance: object, name: str) -> None:
    """Check ``instance`` against the OpenAI-compatible schema ``name`` of this suite."""
    schema = {"$defs": _SCHEMAS["$defs"], "$ref": f"#/$defs/{name}"}
    jsonschema.Draft202012Validator(schema).validate(instance)


def sse_events(body: str) -> list[str]:
    """The ``data:`` payloads of an SSE body, checking the framing on the way."""
    assert body.endswith("\n\n"), body[-40:]
    events = body.split("\n\n")[:-1]
    assert all(e.startswith("data: ") for e in events), events
    return [e[len("data: ") :] for e in events]


@dataclass
class Crashes:
    """Stands in for ``os._exit`` in-process: records why the lane would have died."""

    reasons: list[str]

    def __call__(self, reason: str) -> None:
        self.reasons.append(reason)


@dataclass
class Lane:
    """A fake-vllm subprocess and the URL it announced."""

    process: trio.Process
    url: str
    port: int


def ddsup_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "ddsup", "fake-vllm", *args]


@asynccontextmanager
async def fake_vllm_process(
    *args: str,
    env: dict[str, str] | None = None,
    wait_listening: bool = True,
    stderr: bool = False,
) -> AsyncIterator[Lane]:
    """Run ``ddsup fake-vllm --port 0 ARGS``; always killed and reaped on the way out."""
    argv = ddsup_argv("--port", "0", *args) if "--port" not in args else ddsup_argv(*args)
    process = await trio.lowlevel.open_process(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE if stderr else None,
        env=env or dict(os.environ),
    )
    try:
        port = await read_port(process) if wait_listening else 0
        yield Lane(process, f"http://127.0.0.1:{port}", port)
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            await process.wait()
            assert process.stdout is not None
            await process.stdout.aclose()
            if process.stderr is not None:
                await process.stderr.aclose()


async def read_port(process: trio.Process) -> int:
    """Read the first stdout line, which must announce the bound port."""
    assert process.stdout is not None
    line = b""
    with trio.fail_after(STARTUP_TIMEOUT):
        while not line.endswith(b"\n"):
            chunk = await process.stdout.receive_some(1)
            assert chunk, f"fake-vllm exited before listening: {line!r}"
            line += chunk
    assert line.startswith(LISTENING), line
    return int(line[len(LISTENING) :])


StartLane = Callable[..., Awaitable[str]]
