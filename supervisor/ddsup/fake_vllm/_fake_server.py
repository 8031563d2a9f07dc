"""Serve one fake lane with hypercorn's trio worker, binding only once "loaded".

vLLM refuses connections while it loads the model: its port is not bound until then.
The fake waits ``--startup-delay`` *before* it binds, so a readiness probe sees
"connection refused" exactly as it would with vLLM, then serves until cancelled or until
``shutdown_trigger`` returns, which starts hypercorn's graceful drain: stop accepting,
let in-flight requests finish for up to ``--shutdown-timeout`` seconds, then return.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import cast

import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from hypercorn.typing import ASGIFramework

from ddsup.fake_vllm._app import FakeVllmApp
from ddsup.fake_vllm._behaviour import Behaviour
from ddsup.fake_vllm._engine import Engine, crash_now

ShutdownTrigger = Callable[[], Awaitable[None]]


async def serve_fake_vllm(
    behaviour: Behaviour,
    *,
    shutdown_trigger: ShutdownTrigger | None = None,
    crash: Callable[[str], None] = crash_now,
    engine: Engine | None = None,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``behaviour``'s lane; ``task_status.started(port)`` reports the bound port.

    Returns after a graceful drain once ``shutdown_trigger`` returns; cancelling it stops
    at once. ``crash`` is what ``--crash-after-*`` call (``os._exit`` by default; tests
    running in-process pass something gentler). ``engine``: the engine model to serve
    (the command line passes its own, told when the engine process dies).
    """
    await trio.sleep(behaviour.startup_delay)
    engine = engine or Engine(behaviour, crash)
    app = FakeVllmApp(behaviour, engine)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(partial(_serve, app, behaviour, shutdown_trigger, nursery))
        engine.mark_serving()
        if behaviour.crash_after_seconds is not None:
            nursery.start_soon(_crash_later, behaviour.crash_after_seconds, crash)
        task_status.started(port)


@dataclass(frozen=True)
class _OnBound:
    """hypercorn's ``task_status``: learns the port, names the lane, then reports it."""

    app: FakeVllmApp
    task_status: trio.TaskStatus[int]

    def started(self, binds: list[str]) -> None:
        port = _port(binds[0])
        self.app.bound(port)  # before any request can arrive
        self.task_status.started(port)


async def _serve(
    app: FakeVllmApp,
    behaviour: Behaviour,
    shutdown_trigger: ShutdownTrigger | None,
    siblings: trio.Nursery,
    task_status: trio.TaskStatus[int],
) -> None:
    config = _hypercorn_config(behaviour)
    # hypercorn only ever calls ``started(binds)``: a two-line stand-in is enough.
    on_bound = cast("trio.TaskStatus[list[str]]", _OnBound(app, task_status))
    asgi = cast("ASGIFramework", app)
    await serve(asgi, config, shutdown_trigger=shutdown_trigger, task_status=on_bound)
    siblings.cancel_scope.cancel()  # served and drained: end the timers as well


def _hypercorn_config(behaviour: Behaviour) -> Config:
    config = Config()
    host = f"[{behaviour.host}]" if ":" in behaviour.host else behaviour.host
    config.bind = [f"{host}:{behaviour.port}"]
    config.accesslog = None
    config.errorlog = logging.getLogger("ddsup.fake_vllm")  # warnings and errors only
    config.graceful_timeout = behaviour.shutdown_timeout
    config.include_server_header = False
    return config


def _port(bind: str) -> int:
    """``http://127.0.0.1:8000`` or ``http://[::1]:8000`` → 8000."""
    return int(bind.rsplit(":", 1)[1])


async def _crash_later(seconds: float, crash: Callable[[str], None]) -> None:
    await trio.sleep(seconds)
    crash(f"--crash-after-seconds {seconds:g} reached")
