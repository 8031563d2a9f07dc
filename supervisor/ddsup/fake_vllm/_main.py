"""Running ``ddsup fake-vllm`` in the foreground: engine process, signals, serve or wait.

The order is vLLM's: the engine process starts first (the API server binds its port only
once the engine is up), then the server serves until SIGTERM/SIGINT, drains, and stops
its engine on the way out (unless the engine is told to outlive it). With ``--headless``
there is no API server: the process only waits for a signal, as vLLM's ranks > 0 do.
The output contract is in :mod:`~ddsup.fake_vllm._commands`.
"""

from __future__ import annotations

import argparse
import signal
import sys
from functools import partial

import trio

from ddsup.fake_vllm._behaviour import Behaviour
from ddsup.fake_vllm._commands import (
    HEADLESS_BANNER,
    behaviour_from_args,
    engine_options,
    ignored_flags_line,
)
from ddsup.fake_vllm._engine_core import spawn_engine_core
from ddsup.fake_vllm._server import serve_fake_vllm


def run_fake_vllm(args: argparse.Namespace) -> int:
    """Run the server in the foreground until a signal (exit 0) or a planned crash."""
    behaviour = behaviour_from_args(args)
    line = ignored_flags_line(args)
    if line is not None:
        print(line, file=sys.stderr, flush=True)
    engine = spawn_engine_core(engine_options(behaviour)) if behaviour.spawn_engine else None
    if engine is not None:
        print(f"fake-vllm: engine pid {engine.pid}", file=sys.stderr, flush=True)
    if behaviour.ignore_sigterm:  # after the spawn: an ignored signal is inherited
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        trio.run(_headless if behaviour.headless else _main, behaviour)
    finally:
        if engine is not None:
            engine.finish()
    return 0


async def _headless(behaviour: Behaviour) -> None:
    """No port, no HTTP: wait for the first SIGTERM/SIGINT (SIGINT only if ignoring TERM)."""
    with trio.open_signal_receiver(*_signals(behaviour)) as received:
        print(HEADLESS_BANNER, flush=True)
        async for _ in received:
            return


async def _main(behaviour: Behaviour) -> None:
    shutdown = trio.Event()
    listening = trio.Event()
    async with trio.open_nursery() as nursery:
        await nursery.start(_watch_signals, behaviour, shutdown, listening, nursery.cancel_scope)
        if behaviour.startup_delay > 0:
            print(
                f"fake-vllm: loading the model for {behaviour.startup_delay:g}s",
                file=sys.stderr,
                flush=True,
            )
        port = await nursery.start(partial(_serve_then_stop, behaviour, shutdown, nursery))
        host = f"[{behaviour.host}]" if ":" in behaviour.host else behaviour.host
        print(f"fake-vllm listening on http://{host}:{port}", flush=True)
        listening.set()


async def _serve_then_stop(
    behaviour: Behaviour,
    shutdown: trio.Event,
    nursery: trio.Nursery,
    task_status: trio.TaskStatus[int],
) -> None:
    await serve_fake_vllm(behaviour, shutdown_trigger=shutdown.wait, task_status=task_status)
    nursery.cancel_scope.cancel()


def _signals(behaviour: Behaviour) -> list[signal.Signals]:
    return [signal.SIGINT] if behaviour.ignore_sigterm else [signal.SIGINT, signal.SIGTERM]


async def _watch_signals(
    behaviour: Behaviour,
    shutdown: trio.Event,
    listening: trio.Event,
    stop: trio.CancelScope,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """First signal: drain (or, while still "loading", just stop). Second: stop now."""
    with trio.open_signal_receiver(*_signals(behaviour)) as received:
        task_status.started()
        async for signum in received:
            if shutdown.is_set() or not listening.is_set():
                stop.cancel()
                return
            name = signal.Signals(signum).name
            print(
                f"fake-vllm: {name}: draining for up to {behaviour.shutdown_timeout:g}s",
                file=sys.stderr,
                flush=True,
            )
            shutdown.set()
