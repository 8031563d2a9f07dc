"""Running ``ddsup fake-vllm`` in the foreground: engine process, signals, serve or wait.

The order is vLLM's: the engine process starts first (the API server binds its port only
once the engine is up), then the server serves until SIGTERM/SIGINT, drains, and stops
its engine on the way out (unless the engine is told to outlive it). With ``--headless``
there is no API server: the process only waits for a signal, as vLLM's ranks > 0 do.

Two behaviours of vLLM 0.32's API server are kept on purpose, since a supervisor must
cope with them: SIGTERM while the model loads is ignored (its engine core, in the same
process group, exits; the server then never becomes ready and fails once loading is
over; SIGINT fails it at once, status 1), and when the engine core process dies the server answers ``/health`` with 503
and generation with 500, then exits **0** at the first refused request or within
:data:`ENGINE_WATCHDOG` seconds (vLLM's watchdog). The output contract is in
:mod:`~ddsup.fake_vllm._fake_vllm_command`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import sys
from functools import partial

import trio

from ddsup.fake_vllm._behaviour import Behaviour
from ddsup.fake_vllm._engine import CRASH_EXIT_STATUS, Engine
from ddsup.fake_vllm._engine_core import EngineCore, spawn_engine_core
from ddsup.fake_vllm._fake_server import serve_fake_vllm
from ddsup.fake_vllm._fake_vllm_command import (
    HEADLESS_BANNER,
    behaviour_from_args,
    engine_options,
    ignored_flags_line,
)

ENGINE_WATCHDOG = 5.0  # vLLM's VLLM_WATCHDOG_TIME_S: how often it looks for a dead engine


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
        if behaviour.headless:
            trio.run(_headless, behaviour)
            return 0
        return trio.run(_main, behaviour, engine)
    finally:
        if engine is not None:
            engine.finish()


async def _headless(behaviour: Behaviour) -> None:
    """No port, no HTTP: wait for the first SIGTERM/SIGINT (SIGINT only if ignoring TERM)."""
    with trio.open_signal_receiver(*_signals(behaviour)) as received:
        print(HEADLESS_BANNER, flush=True)
        async for _ in received:
            return


@dataclasses.dataclass
class _Loading:
    """The signal that came while the model loaded, if any (vLLM then never becomes
    ready); ``scope`` is the load's, which SIGINT cuts short."""

    signal: str | None = None
    scope: trio.CancelScope = dataclasses.field(default_factory=trio.CancelScope)


async def _main(behaviour: Behaviour, process: EngineCore | None) -> int:
    shutdown = trio.Event()
    listening = trio.Event()
    loading = _Loading()
    engine = Engine(behaviour)
    async with trio.open_nursery() as nursery:
        watch = partial(_watch_signals, behaviour, shutdown, listening, loading, process)
        await nursery.start(watch, nursery.cancel_scope)
        if behaviour.startup_delay > 0:
            print(
                f"fake-vllm: loading the model for {behaviour.startup_delay:g}s",
                file=sys.stderr,
                flush=True,
            )
            with loading.scope:
                await trio.sleep(behaviour.startup_delay)
        if loading.signal is not None:
            print(
                f"fake-vllm: engine core initialization failed: it was stopped "
                f"({loading.signal}) while the model loaded",
                file=sys.stderr,
                flush=True,
            )
            nursery.cancel_scope.cancel()
            return CRASH_EXIT_STATUS
        loaded = dataclasses.replace(behaviour, startup_delay=0.0)
        serve = partial(_serve_then_stop, loaded, engine, shutdown, nursery)
        port = await nursery.start(serve)
        host = f"[{behaviour.host}]" if ":" in behaviour.host else behaviour.host
        print(f"fake-vllm listening on http://{host}:{port}", flush=True)
        listening.set()
        if process is not None:
            nursery.start_soon(_watch_engine, process, engine, shutdown)
    return 0


async def _serve_then_stop(
    behaviour: Behaviour,
    engine: Engine,
    shutdown: trio.Event,
    nursery: trio.Nursery,
    task_status: trio.TaskStatus[int],
) -> None:
    await serve_fake_vllm(
        behaviour, shutdown_trigger=shutdown.wait, engine=engine, task_status=task_status
    )
    nursery.cancel_scope.cancel()


async def _watch_engine(process: EngineCore, engine: Engine, shutdown: trio.Event) -> None:
    """When the engine process dies: vLLM's ``EngineDeadError``, then a clean exit (0)."""
    fd = os.pidfd_open(process.pid)
    try:
        await trio.lowlevel.wait_readable(fd)
    finally:
        os.close(fd)
    status = process.process.wait()
    print(
        f"fake-vllm: EngineDeadError: the engine core process died (status {status})",
        file=sys.stderr,
        flush=True,
    )
    engine.die()
    with trio.move_on_after(ENGINE_WATCHDOG):
        await engine.failed.wait()
    shutdown.set()


def _signals(behaviour: Behaviour) -> list[signal.Signals]:
    return [signal.SIGINT] if behaviour.ignore_sigterm else [signal.SIGINT, signal.SIGTERM]


async def _watch_signals(
    behaviour: Behaviour,
    shutdown: trio.Event,
    listening: trio.Event,
    loading: _Loading,
    process: EngineCore | None,
    stop: trio.CancelScope,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """First signal: drain. Second: stop now. While loading, as vLLM 0.32 does: the
    signal ends the engine process (in vLLM the process group's signal reaches it), and
    then SIGTERM is ignored until the load is over, while SIGINT fails the start now."""
    with trio.open_signal_receiver(*_signals(behaviour)) as received:
        task_status.started()
        async for signum in received:
            name = signal.Signals(signum).name
            if not listening.is_set() and loading.signal is None:
                if signum == signal.SIGTERM:
                    print(
                        "fake-vllm: SIGTERM while loading: ignored, as vLLM's API server does",
                        file=sys.stderr,
                        flush=True,
                    )
                else:
                    loading.scope.cancel()
                loading.signal = name
                if process is not None:
                    process.stop()
                continue
            if shutdown.is_set() or not listening.is_set():
                stop.cancel()
                return
            print(
                f"fake-vllm: {name}: draining for up to {behaviour.shutdown_timeout:g}s",
                file=sys.stderr,
                flush=True,
            )
            shutdown.set()
