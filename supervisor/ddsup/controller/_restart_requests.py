"""An operator's ``ddsup restart`` at the controller: begin it, report it until it is over.

The request is checked against the run's state (:meth:`RunState.restart_targets`; a
refusal is answered with its reason), fed to it as :class:`RestartRequested`, and then
every change of step of each instance is sent back on the operator's connection, woken
by the controller's "something changed" event, until the restart is over.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from ddsup.channel import (
    Channel,
    RestartAnswer,
    RestartOver,
    RestartProgress,
    RestartRequest,
    RestartStep,
)
from ddsup.decide import Input, RestartRefused, RestartRequested, RunState


async def serve_restart(
    request: RestartRequest,
    channel: Channel,
    run: RunState,
    feed: Callable[[Input], None],
    changed: Callable[[], trio.Event],
    ticket: int,
) -> None:
    """Answer ``request`` on ``channel``; ``changed()`` is set after every input."""
    try:
        instances = run.restart_targets(request.names)
    except RestartRefused as err:
        await channel.send(RestartAnswer(error=str(err)))
        return
    feed(RestartRequested(ticket, instances, request.rolling))
    await channel.send(RestartAnswer(instances))
    shown: dict[str, RestartStep] = {}
    while True:
        event = changed()  # before looking: a change while we send wakes the wait below
        job = run.restarts.job(ticket)
        assert job is not None
        for instance, step in list(job.steps.items()):
            if shown.get(instance) is not step:
                shown[instance] = step
                await channel.send(RestartProgress(instance, step))
        if job.over:
            await channel.send(RestartOver(job.ok))
            return
        await event.wait()
