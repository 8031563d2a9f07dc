"""Once trio runs: the controller takes over what the head start set up without it.

``ddsup start`` launched its agents before it imported trio (``_head_start``). This
module is imported after that launch, with the controller (``_start`` imports
``_controller`` by name, as ``_cli`` imports a command's module), so trio's import and
the controller's run beside the agents' start-up. :func:`take_over` is the first thing
the controller does inside ``trio.run``, in this order:

1. the agents' processes are adopted (managed children: the adopted-orphan reaper,
   which starts with the containment, must leave their exit status to the fleet); local
   agents once their forker has named them (``_forked_agents``);
2. the containment is opened on the layers already open (its reaper, its scans, its
   close at the very end);
3. trio's signal receiver replaces the held signals' handlers, and what they held is
   delivered into it (a ``scancel`` during the start-up stops the run: 143);
4. the control socket becomes the channel's listener.

The result, :class:`TakenOver`, is what the controller owns from then on.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field

import trio

from ddsup._errors import DdsupError
from ddsup.agent import receive_held
from ddsup.controller._forked_agents import adopt_forked
from ddsup.controller._head_start import HeadStart
from ddsup.controller._launcher import CONTROLLER, AgentProcess, ForkedAgents, Launcher
from ddsup.controller._run_facts import RunFacts
from ddsup.process import Containment, adopt, open_containment


@dataclass
class TakenOver:
    """What the controller owns of the head start (``_head_start``), now inside trio."""

    invocation_id: str
    secret: str = field(repr=False)
    resources: AsyncExitStack  # the containment and the signal receiver: closed last
    containment: Containment
    signals: AsyncIterator[int]
    listener: trio.SocketListener | None  # None: failed says why
    facts: RunFacts | None
    launcher: Launcher | None
    nodes: tuple[str, ...]
    agents: list[AgentProcess]
    failed: DdsupError | None
    attempt: int  # the job's attempt in its state dir

    async def aclose(self) -> None:
        """Close what the controller did not take over (idempotent: a no-op once it did).

        Not inside a shielded scope of its own: the containment's nursery, opened by
        :func:`take_over`, must be exited from the scope it was opened in (the
        containment shields its own clean-up)."""
        await self.resources.aclose()


async def take_over(head: HeadStart, naming: float) -> TakenOver:
    """Adopt, open, receive, listen (module docstring); the caller owns the result.

    A forker has ``naming`` seconds to name the agents it forked."""
    agents: list[AgentProcess] = []
    failed = head.failed
    for started in head.agents:
        if isinstance(started, ForkedAgents):
            forked, not_started = await adopt_forked(started, naming)
            agents += forked
            failed = failed or not_started
        else:
            agents.append(
                AgentProcess(started.label, started.nodes, adopt(started.popen, started.env))
            )
    resources = AsyncExitStack()
    try:
        containment = await resources.enter_async_context(
            open_containment(
                head.invocation_id, state_dir=None, name=CONTROLLER, root=True, opened=head.layers
            )
        )
        signals = resources.enter_context(receive_held(head.signals))
        listener = None
        if head.listening is not None:
            listener = trio.SocketListener(trio.socket.from_stdlib_socket(head.listening))
            resources.push_async_callback(listener.aclose)  # the server closes it first
    except BaseException:
        await resources.aclose()
        raise
    return TakenOver(
        head.invocation_id,
        head.secret,
        resources,
        containment,
        signals,
        listener,
        head.facts,
        head.launcher,
        head.nodes,
        agents,
        failed,
        head.attempt,
    )
