"""The sweep at the end of a run, from inside the supervisor's trio loop."""

from __future__ import annotations

from collections.abc import Collection

import trio

from ddsup.process._sweep import find_run_processes, sweep

_SWEEP_POLL = 0.02


async def sweep_until_gone(
    invocation_id: str,
    *,
    timeout: float = 5.0,  # noqa: ASYNC109 (the engine's API: a bound that reports survivors)
    exclude: Collection[int] = (),
) -> list[int]:
    """SIGKILL the run's processes until none is left or ``timeout``; the survivors."""
    with trio.move_on_after(timeout):
        # no event exists for "a process that is not our child died": bounded poll
        while sweep(invocation_id, exclude=exclude):  # noqa: ASYNC110
            await trio.sleep(_SWEEP_POLL)
        return []
    return find_run_processes(invocation_id, exclude=exclude)
