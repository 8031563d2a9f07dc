"""The node agent: supervises the lanes (and each-node services) of one node.

``ddsup start`` launches one agent per lane node (through ``srun`` under Slurm, as a local
process for ``--nodes N`` rehearsals). The agent connects back to the controller over the
authenticated control channel, receives the plan, runs preflight, then starts, restarts,
probes and stops its instances on command, reporting every transition. If the controller
vanishes, the agent stops everything it runs and exits: a node never keeps lanes for a
run that no longer exists.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
from pathlib import Path
from typing import Any

import trio

from ddsup._errors import UsageError
from ddsup.channel._channel import ADDRESS_ENV, SECRET_ENV, Channel, ChannelError, connect_channel
from ddsup.plan._model import Plan
from ddsup.process import open_containment
from ddsup.record._events import Event
from ddsup.record._state_dir import StateDir
from ddsup.run._node_runner import NodeRunner
from ddsup.run._preflight import run_preflight
from ddsup.service._environment import RunContext
from ddsup.units import UnitSet, load_unit_set


def configure_agent(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--node", help="node name in the plan (default: $SLURMD_NODENAME)")
    parser.add_argument("--gpus", type=int, default=None, help="GPUs on this node, if known")


def run_agent(args: argparse.Namespace) -> int:
    secret = os.environ.pop(SECRET_ENV, None)
    address = os.environ.pop(ADDRESS_ENV, None)
    node = args.node or os.environ.get("SLURMD_NODENAME")
    if not secret or not address or not node:
        raise UsageError("ddsup agent is started by ddsup start, not by hand")
    return trio.run(_agent_main, node, address, secret, args.gpus)


async def _agent_main(node: str, address: str, secret: str, gpus: int | None) -> int:
    # Until the signal watcher runs, a stop signal (scancel) must not kill the agent
    # half-way: nothing runs yet, and the controller will tell it to shut down.
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    hello = {"op": "hello", "role": "agent", "node": node, "pid": os.getpid()}
    channel = await connect_channel(address, secret, hello)
    setup = await channel.receive()
    if setup is None or setup.get("op") != "setup":
        return 1
    run = RunContext(**setup["run"])
    plan = Plan.from_dict(setup["plan"])
    units = load_unit_set(run.unit_dir)
    try:
        # ddsup:containment (issue 15): every no-orphan layer of this node, opened once
        async with open_containment(
            run.invocation_id, state_dir=run.state_dir, name=f"agent-{node}", root=False
        ) as containment:
            layers = containment.layers  # ddsup:containment: the controller records them
            assert layers is not None
            event = Event(
                "containment", node=node, reason=layers.summary(), details=layers.to_json()
            )
            await channel.send({"op": "event", "event": event.to_dict()})
            await _serve_controller(channel, node, units, plan, run, gpus)
    finally:
        await channel.aclose()
    return 0


async def _serve_controller(
    channel: Channel, node: str, units: UnitSet, plan: Plan, run: RunContext, gpus: int | None
) -> None:
    result = run_preflight(
        node, units, plan, gpus_available=gpus, slurm_node=os.environ.get("SLURMD_NODENAME")
    )
    plan = plan.with_ports(result.ports)
    await channel.send({"op": "preflight", **result.to_dict()})
    outbox_send, outbox_receive = trio.open_memory_channel[dict[str, Any]](math.inf)

    def emit(event: Event) -> None:
        outbox_send.send_nowait({"op": "event", "event": event.to_dict()})

    forwarded = trio.Event()

    async def forward() -> None:
        async for message in outbox_receive:
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await channel.send(message)
        forwarded.set()

    async with trio.open_nursery() as services:
        runner = NodeRunner(
            units=units,
            plan=plan,
            run=run,
            state=StateDir(Path(run.state_dir)),
            nursery=services,
            emit=emit,
        )
        services.start_soon(forward)
        with trio.CancelScope() as loop_scope:
            services.start_soon(_watch_signals, channel, runner, loop_scope)
            try:
                await _command_loop(channel, runner, services)
            except ChannelError:
                pass  # the controller is gone: stop everything below
            finally:
                with trio.CancelScope(shield=True):
                    await runner.stop()
                    with trio.move_on_after(2):
                        await outbox_send.aclose()
                        await forwarded.wait()  # every event out before "stopped"
                        await channel.send({"op": "stopped", "node": node})
        services.cancel_scope.cancel()


async def _watch_signals(channel: Channel, runner: NodeRunner, loop: trio.CancelScope) -> None:
    """SIGTERM/SIGINT/SIGHUP (e.g. ``scancel``): stop this node's units gracefully.

    The controller hears why first, so a scancel ends the run as "stopped" rather than as
    a lost agent; a second signal SIGKILLs everything at once, as for ``ddsup start``.
    """
    stops = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    for stop in stops:  # after the receiver closes, late signals must not cut cleanup
        signal.signal(stop, signal.SIG_IGN)
    with trio.open_signal_receiver(*stops) as signals:
        async for signum in signals:
            if loop.cancel_called:
                runner.kill_all()
                continue
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await channel.send({"op": "signalled", "signal": int(signum)})
            loop.cancel()


async def _command_loop(channel: Channel, runner: NodeRunner, nursery: trio.Nursery) -> None:
    while True:
        message = await channel.receive()
        if message is None:
            return
        op = message.get("op")
        if op == "start":
            for item in message["instances"]:
                runner.start(item["instance"], delay=item.get("delay"))
        elif op == "stop":
            names = message.get("instances")
            nursery.start_soon(runner.stop, names)
        elif op == "kill":
            runner.kill_all()
        elif op == "signal":
            runner.signal(message["instances"], int(message["signal"]))
        elif op == "shutdown":
            return
