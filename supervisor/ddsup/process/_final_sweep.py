"""The sweep at the end of a run, from inside the supervisor's trio loop."""

from __future__ import annotations

from collections.abc import Collection
from functools import partial

import trio

from ddsup.process._sweep import find_run_processes, sweep

_SWEEP_POLL = 0.02


async def sweep_until_gone(
    invocation_id: str,
    *,
    timeout: float = 5.0,  # noqa: ASYNC109 (the engine's API: a bound that reports survivors)
    exclude: Collection[int] = (),
    node: str | None = None,
) -> list[int]:
    """SIGKILL the run's processes (of its ``node`` only, when given) until none is left
    or ``timeout``; the survivors. Each pass reads every process's environment: a thread."""
    scan = partial(sweep, invocation_id, exclude=exclude, node=node)
    with trio.move_on_after(timeout):
        # no event exists for "a process that is not our child died": bounded poll
        while await trio.to_thread.run_sync(scan):  # noqa: ASYNC110
            await trio.sleep(_SWEEP_POLL)
        return []
    return find_run_processes(invocation_id, exclude=exclude, node=node)
