"""``ddsup start``'s head start: the agents are launched before the controller is imported.

An agent's Python start-up (~0.3 s of CPU: trio, the channel, the services) used to
begin only once ``ddsup start`` had finished its own (~0.3 s more): the ``srun`` step of
the agents was spawned by the fully imported controller, so the two start-ups ran one
after the other. Here is what launching the agents needs, and nothing more, so that
``run._start`` can launch them first and import the controller (``_controller``: the
channel's messages, the run's state, the services) while they import theirs:

- the units, parsed and validated, the allocation and the plan (``_prepare``): a bad unit
  file or a plan that does not fit still fails before anything is spawned or written;
- the state directory (the agents' log is in it);
- the containment (``process``), so the sentinel covers the ``srun`` from its first
  instant, and the signal receiver (``_signals``), so a ``scancel`` that arrives while
  the controller is still importing waits for it rather than killing it mid-start;
- the control socket, bound (the agents' connections wait in its backlog until the
  controller serves it), the run's id and secret, and so the agents' environment.

The controller then owns all of it (:class:`HeadStart`): it closes ``resources`` where
it used to close the containment, serves ``listener``, and watches ``agents``. A failure
to resolve the control address or to launch the agents is kept in ``failed`` and ends
the run the way it did before (``StartupFailed``: result.json, exit status).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field

import trio

from ddsup._errors import DdsupError
from ddsup.channel._hello import new_secret
from ddsup.channel._listener import open_listener
from ddsup.plan._model import Plan
from ddsup.process import Containment, open_containment
from ddsup.record._state_dir import ControlAddress, StateDir
from ddsup.run._control_host import control_host
from ddsup.run._launcher import CONTROLLER, AgentProcess, Launcher, launcher_for
from ddsup.run._open_files import ensure_open_files, open_files_needed
from ddsup.run._ordering import agent_nodes, survives_node_loss
from ddsup.run._prepare import PreparedRun
from ddsup.run._run_facts import RunFacts, agent_environment
from ddsup.run._signals import run_signal_receiver
from ddsup.run._slurm_job import attempt_of


@dataclass
class HeadStart:
    """What ``ddsup start`` set up before its controller was imported (module docstring)."""

    invocation_id: str
    secret: str = field(repr=False)
    resources: AsyncExitStack  # the containment and the signal receiver: closed last
    containment: Containment
    signals: AsyncIterator[int]
    listener: trio.SocketListener | None = None  # None: failed says why
    facts: RunFacts | None = None  # once the control address is known
    launcher: Launcher | None = None
    nodes: tuple[str, ...] = ()  # the nodes whose agents were launched
    agents: list[AgentProcess] = field(default_factory=list)
    failed: DdsupError | None = None

    async def aclose(self) -> None:
        """Close what no controller took over (idempotent: a no-op once it did).

        Not inside a shielded scope of its own: the containment's nursery, opened by
        :func:`head_start`, must be exited from the scope it was opened in (the
        containment shields its own clean-up)."""
        await self.resources.aclose()


async def head_start(prepared: PreparedRun, state: StateDir) -> HeadStart:
    """Open the containment and the signal receiver, bind the control socket, launch the
    agents; the caller owns the result (:meth:`HeadStart.aclose` if no controller does)."""
    resources = AsyncExitStack()
    invocation_id = uuid.uuid4().hex
    try:
        containment = await resources.enter_async_context(
            open_containment(invocation_id, state_dir=state.path, name=CONTROLLER, root=True)
        )
        units = prepared.units.units
        signals = resources.enter_context(
            run_signal_receiver({s for u in units for s in u.service.forward_signals})
        )
    except BaseException:
        await resources.aclose()
        raise
    head = HeadStart(invocation_id, new_secret(), resources, containment, signals)
    try:
        await _listen(head, prepared, state)
        await _launch(head, prepared, state)
    except DdsupError as err:
        head.failed = err
    return head


async def _listen(head: HeadStart, prepared: PreparedRun, state: StateDir) -> None:
    """Bind the control socket where the agents will reach it; the run's facts with it."""
    host = await control_host(prepared.allocation, os.environ)
    head.listener = await open_listener(host)
    head.resources.push_async_callback(head.listener.aclose)  # the server closes it first
    options = prepared.options
    head.facts = RunFacts(
        invocation_id=head.invocation_id,
        state_dir=str(state.path),
        unit_dir=str(options.directory.resolve()),
        control=ControlAddress(host, head.listener.socket.getsockname()[1]),
        agent_timeout=options.agent_timeout,
        attempt=attempt_of(os.environ),
        rehearse=options.rehearse,
        secret=head.secret,
    )


async def _launch(head: HeadStart, prepared: PreparedRun, state: StateDir) -> None:
    """The agents of every node that needs one; without a plan yet, of every node that may
    hold lanes (the plan is then made from the GPUs they report, and the launcher's
    fail-fast is Slurm's default: whether a node may be lost is the plan's to say)."""
    units, allocation, plan = prepared.units, prepared.allocation, prepared.plan
    nodes = agent_nodes(units, plan) if plan is not None else tuple(allocation.lane_nodes())
    if not nodes:
        return
    assert head.facts is not None
    survivable = plan is not None and survives_node_loss(units, plan)
    launcher = launcher_for(allocation, units, prepared.options.srun_args, survivable=survivable)
    ensure_open_files(open_files_needed(len(nodes), _client_instances(plan)))
    env = agent_environment(head.facts, units, os.environ)
    head.launcher, head.nodes = launcher, nodes
    head.agents = await launcher.launch(nodes, env, state)


def _client_instances(plan: Plan | None) -> int:
    return 0 if plan is None else len(plan.on_node(plan.client))
