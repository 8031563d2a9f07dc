"""The node agent: supervises the lanes (and each-node services) of one node.

``ddsup start`` launches one agent per node (through ``srun`` under Slurm, as a local
process for ``--nodes N`` rehearsals). The agent connects back to the controller over the
authenticated control channel, says what GPUs the job was given on its node
(``ddsup.plan._gpus``; ``--gpus-per-node`` simulates them), receives the plan, runs
preflight, then starts, restarts, probes and stops its instances on command (a
multi-node replica's ranks are taken down and resumed as one), reporting every
transition. If the controller vanishes, the agent stops everything it runs and exits: a
node never keeps lanes for a run that no longer exists.
"""

from __future__ import annotations

import contextlib
import math
import os
import reprlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import trio

from ddsup._errors import UsageError
from ddsup.agent._held_signals import STOP_SIGNALS, HeldSignals
from ddsup.agent._node_runner import NodeRunner
from ddsup.agent._ports import HeldPorts
from ddsup.agent._preflight import run_preflight
from ddsup.agent._process_end import end_process
from ddsup.agent._signals import receive_held
from ddsup.channel import (
    ADDRESS_ENV,
    SECRET_ENV,
    AgentChannel,
    AgentMessage,
    AgentStopped,
    ChannelError,
    EventReport,
    FailHeld,
    Hello,
    Inventory,
    Kill,
    Restart,
    Resume,
    Role,
    Setup,
    Shutdown,
    SignalInstances,
    Signalled,
    Start,
    Stop,
    TakeDown,
    connect_agent,
    receive_within,
)
from ddsup.decide import rehearsal_units
from ddsup.plan import GpuList, Plan, detect_gpu_list
from ddsup.process import AGENT_ENV, open_containment
from ddsup.record import Contained, NodeEvent, StateDir, open_state_dir
from ddsup.service import RunContext
from ddsup.units import UnitSet, load_unit_set

if TYPE_CHECKING:  # only ``ddsup agent`` through ``_cli`` has a parser: the agent's own
    import argparse  # entry (``_agent_command``) reads its three options by hand


def configure_agent(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--node", help="simulated node: its name in the plan (default: $SLURMD_NODENAME)"
    )
    parser.add_argument(
        "--gpus-per-node", type=int, default=None, help="simulated GPUs (default: detected)"
    )
    parser.add_argument(
        "--covered-by",
        metavar="SUPERVISOR",
        help="a supervisor on this machine whose sentinel covers this agent (a simulated"
        " node: ddsup start's, which ends this agent's units if it dies): start none",
    )


def run_agent(args: argparse.Namespace) -> int:
    start_agent(args.node, args.gpus_per_node, args.covered_by)


def start_agent(node: str | None, gpus_per_node: int | None, covered_by: str | None) -> NoReturn:
    """Run this node's agent until the controller says shutdown (or goes away), then end
    the process; UsageError when not started by ``ddsup start`` (no secret, no address)."""
    secret = os.environ.pop(SECRET_ENV, None)
    address = os.environ.pop(ADDRESS_ENV, None)
    node = node or os.environ.get("SLURMD_NODENAME")
    if not secret or not address or not node:
        raise UsageError("ddsup agent is started by ddsup start, not by hand")
    gpus = _node_gpus(gpus_per_node)
    status = trio.run(_agent_main, node, address, secret, gpus, covered_by)
    end_process(status)


def _node_gpus(simulated: int | None) -> GpuList:
    """The GPUs this node gave the job (``ddsup.plan._gpus``), or the simulated ones."""
    if simulated is not None:
        return GpuList.simulated(simulated)
    found = detect_gpu_list(os.environ)
    return found or GpuList((), "no CUDA_VISIBLE_DEVICES, Slurm GPU variables or nvidia-smi")


async def _agent_main(
    node: str, address: str, secret: str, gpus: GpuList, covered_by: str | None = None
) -> int:
    # Until the signal watcher runs, a stop signal (scancel, or one sent to this agent
    # alone) must neither kill the agent half-way nor be lost: it is held, and the watcher
    # acts on it once it runs (``_held_signals``, as ``ddsup start`` holds its own).
    stop_signals = HeldSignals(STOP_SIGNALS)
    stop_signals.hold()
    hello = Hello(Role.AGENT, secret, node=node, pid=os.getpid())
    channel = await connect_agent(address, hello)
    await channel.send(Inventory(gpus.devices, gpus.source))
    setup = await channel.receive()
    if not isinstance(setup, Setup):
        return 0  # the run ended before it had a plan (Shutdown), or the controller went
    run = _run_context(setup)
    plan = setup.plan
    units = load_unit_set(run.unit_dir)
    supervisor = f"agent-{node}"
    os.environ[AGENT_ENV] = supervisor  # every unit it starts inherits it: its sentinel's mark
    if setup.rehearse:  # the same units the controller planned: fake-vllm lanes
        units = rehearsal_units(units)
    state = open_state_dir(Path(run.state_dir))  # held from here on: all it writes goes there
    try:
        # every no-orphan layer of this node (docs/no-orphans.md), opened once
        async with open_containment(
            run.invocation_id,
            state_dir=run.state_dir,
            state_dir_fd=None if state.held is None else state.held.fd,
            name=supervisor,
            root=False,
            covered_by=covered_by,
        ) as containment:
            layers = containment.layers  # the controller records them (status shows them)
            assert layers is not None
            contained = Contained(
                node=node,
                supervisor=layers.supervisor,
                summary=layers.summary(),
                details=layers.to_json(),
            )
            await channel.send(EventReport(contained))
            await _serve_controller(
                channel,
                node,
                units,
                plan,
                run,
                state,
                gpus,
                setup.agent_timeout,
                rehearse=setup.rehearse,
                stop_signals=stop_signals,
            )
    finally:
        state.close()
        await channel.aclose()
    return 0


def _run_context(setup: Setup) -> RunContext:
    return RunContext(
        invocation_id=setup.invocation_id,
        state_dir=setup.state_dir,
        unit_dir=setup.unit_dir,
        job_id=setup.job_id,
        endpoint_url=setup.endpoint_url,
        attempt=setup.attempt,
    )


async def _serve_controller(
    channel: AgentChannel,
    node: str,
    units: UnitSet,
    plan: Plan,
    run: RunContext,
    state: StateDir,
    gpus: GpuList,
    silence: float,
    *,
    rehearse: bool,
    stop_signals: HeldSignals,
) -> None:
    report, held = run_preflight(
        node, units, plan, gpus=gpus, check_model_path=not rehearse, state_dir=run.state_dir
    )
    plan = plan.with_ports(dict(report.ports))
    await channel.send(report)
    flushes_send, flushes_receive = trio.open_memory_channel[None](math.inf)
    flushed = trio.Event()

    def post(message: AgentMessage) -> None:
        """In order with everything sent before; written at once when the socket takes
        it (see ``LineChannel.post``), else by ``_flush``."""
        if not channel.post([message]):
            flushes_send.send_nowait(None)

    def emit(event: NodeEvent) -> None:
        post(EventReport(event))

    async with trio.open_nursery() as services:
        runner = NodeRunner(
            units=units,
            plan=plan,
            run=run,
            state=state,
            nursery=services,
            emit=emit,
        )
        services.start_soon(_flush, flushes_receive, channel, flushed)
        with trio.CancelScope() as loop_scope:
            services.start_soon(_watch_signals, channel, runner, loop_scope, stop_signals)
            try:
                mine = frozenset(p.instance for p in plan.on_node(node))
                # the controller's heartbeats are answered in order with the events
                # (``_heartbeat``); ChannelError: the controller is gone (or silent, or
                # broke the protocol)
                with contextlib.suppress(ChannelError):
                    await _command_loop(channel, runner, services, silence, mine, held, post)
            finally:
                held.release()
                with trio.CancelScope(shield=True):
                    await runner.stop()
                    with trio.move_on_after(2):
                        await flushes_send.aclose()
                        await flushed.wait()  # every event out before "stopped"
                        await channel.send(AgentStopped(node))
        services.cancel_scope.cancel()


async def _flush(
    wanted: trio.MemoryReceiveChannel[None], channel: AgentChannel, done: trio.Event
) -> None:
    """What ``post`` could not write at once, whenever it asks, until it is closed; then
    ``done``. What queued meanwhile goes in the same write."""
    async for _ in wanted:
        with contextlib.suppress(trio.WouldBlock, trio.EndOfChannel):
            while True:
                wanted.receive_nowait()
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await channel.flush()
    done.set()


async def _watch_signals(
    channel: AgentChannel, runner: NodeRunner, loop: trio.CancelScope, held: HeldSignals
) -> None:
    """SIGTERM/SIGINT/SIGHUP (e.g. ``scancel``): stop this node's units gracefully.

    The controller hears why first, so a scancel ends the run as "stopped" rather than as
    a lost agent; a second signal SIGKILLs everything at once, as for ``ddsup start``.
    """
    with receive_held(held) as signals:  # what arrived during the start-up comes first
        async for signum in signals:
            if loop.cancel_called:
                runner.kill_all()
                continue
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await channel.send(Signalled(int(signum)))
            loop.cancel()


_NAMING = (Start, Stop, Restart, SignalInstances, TakeDown, Resume, FailHeld)


async def _command_loop(
    channel: AgentChannel,
    runner: NodeRunner,
    nursery: trio.Nursery,
    silence: float,
    mine: frozenset[str],
    held: HeldPorts,
    answer: Callable[[AgentMessage], None],
) -> None:
    """The controller's commands until it says shutdown (or goes away, or is silent for
    ``silence`` seconds: ChannelError); its heartbeats are answered through ``answer``.

    A command that names an instance this node does not run breaks the protocol like a
    line that does not decode (ChannelError): the agent then stops what it runs. The
    ports preflight picked are held until the first start: by then every agent has
    picked its own (the controller starts lanes once all reported).
    """
    while True:
        message = await receive_within(channel, silence, "the controller", answer=answer)
        if message is None or isinstance(message, Shutdown):
            return
        named = message.instances if isinstance(message, _NAMING) else ()
        if not set(named) <= mine:
            strange = reprlib.repr(sorted(set(named) - mine))
            raise ChannelError(f"the controller named instances not on this node: {strange}")
        if isinstance(message, Start):
            held.release()
            for instance in message.instances:
                runner.start(instance)
        elif isinstance(message, Stop):
            nursery.start_soon(runner.stop, message.instances, message.reason)
        elif isinstance(message, Restart):
            runner.restart(message.instances, message.reason)
        elif isinstance(message, Kill):
            runner.kill_all()
        elif isinstance(message, SignalInstances):
            runner.signal(message.instances, message.signum)
        elif isinstance(message, TakeDown):
            runner.take_down(message.instances, message.reason)
        elif isinstance(message, Resume):
            for instance in message.instances:
                runner.resume(instance, message.delay, message.attempt, message.master_port)
        elif isinstance(message, FailHeld):
            runner.fail_held(message.instances, message.reason, message.readiness_timeout)
        else:
            raise ChannelError(f"unexpected {message.op!r} message from the controller")
