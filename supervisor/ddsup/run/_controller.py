"""``ddsup start``: the controller of one run.

Order: plan → state dir → agents (preflight on every node) → lanes (staggered per node) →
endpoint once ``min_ready`` lanes of each model are ready → worker. The first cause that
ends the run (worker exit, a unit failed for good, a readiness timeout, a signal, an
agent lost) is the :class:`~ddsup.record._outcome.Outcome`; then everything stops in reverse
dependency order (instances of one level in parallel), the agents shut down, and a sweep
by invocation id removes whatever escaped. ``result.json`` is written on every path.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import trio

from ddsup._errors import DdsupError, PreflightError, UnitFileError, UsageError
from ddsup.channel._channel import (
    ADDRESS_ENV,
    SECRET_ENV,
    Channel,
    ChannelError,
    new_secret,
    serve_channel,
)
from ddsup.plan import make_plan
from ddsup.plan._allocation import (
    detect_gpus,
    local_nodes,
    slurm_hostnames,
    slurm_node_addresses,
)
from ddsup.plan._model import Node, Plan, PlannedInstance
from ddsup.process import Containment, open_containment
from ddsup.record import _outcome
from ddsup.record._events import Event, EventLog
from ddsup.record._outcome import Outcome
from ddsup.record._state_dir import StateDir, write_private
from ddsup.run._console import Console
from ddsup.run._lane_feed import LanePublisher
from ddsup.run._launcher import AgentProcess, Launcher, LocalLauncher, SlurmLauncher
from ddsup.run._node_runner import NodeRunner
from ddsup.run._ordering import lanes_by_model, runs_on_agent, start_after, stop_levels
from ddsup.service._environment import INVOCATION_ENV, RunContext
from ddsup.units import load_unit_set
from ddsup.units._model import EndpointSection, OnFailure, UnitSet, UnitType

PREFLIGHT_TIMEOUT = 120.0
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
AGENT_SHUTDOWN_GRACE = 10.0


class Controller:
    """Owns one run from plan to result."""

    def __init__(self, args: argparse.Namespace, state: StateDir) -> None:
        self.args = args
        self.state = state
        self.invocation_id = uuid.uuid4().hex
        self.secret = new_secret()
        self.events = EventLog(state.events)
        self.console = Console(verbose=args.verbose, quiet=args.quiet)
        self.outcome: Outcome | None = None
        self.ending = trio.Event()
        self.stopping = False
        self.killing = False
        self.started = time.time()
        # per-instance bookkeeping, fed by events from agents and the local runner
        self.states: dict[str, dict[str, Any]] = {}
        self.ready: dict[str, trio.Event] = {}
        self.final: dict[str, trio.Event] = {}
        self.agents: dict[str, Channel] = {}
        self.preflight: dict[str, dict[str, Any]] = {}
        self.preflight_done = trio.Event()
        self.lane_feed = LanePublisher()
        self.agent_processes: list[AgentProcess] = []
        self.units: UnitSet | None = None
        self.plan: Plan | None = None
        self.local: NodeRunner | None = None
        self.launcher_name = "local"
        self.control_port: int | None = None
        self.expected_agents: set[str] = set()
        self.client_address = "127.0.0.1"
        self._background: trio.Nursery | None = None  # owns fire-and-forget sends
        self.containment: dict[str, Any] | None = None  # no-orphan layers (run.json, status)
        self._changed = trio.Event()

    # --- top level ------------------------------------------------------------------
    async def main(self) -> int:
        self._write_run_json()
        self._event(Event("run", reason="starting", details={"invocation_id": self.invocation_id}))
        try:
            units = self._load_units()
            launcher, plan = self._make_plan(units)
            self.units, self.plan = units, plan
            self.console.lanes(self._lane_models(units, plan))
            write_private(self.state.plan, plan.to_json())
            await self._supervise(units, plan, launcher)
        except DdsupError as err:
            self._end(
                Outcome(err.result_status, err.exit_status, getattr(err, "unit", None), str(err))
            )
            self.console.error(str(err))
        outcome = self.outcome or Outcome("stopped", 1, None, "ended without a cause")
        self.state.write_json(self.state.result, outcome.to_dict())
        self._event(Event("run", reason="finished", details=outcome.to_dict()))
        self.events.close()
        self.console.result(outcome, self.state.path)
        return outcome.exit_code

    def _load_units(self) -> UnitSet:
        directory = Path(self.args.directory)
        if not directory.is_dir():
            raise UsageError(f"{directory} is not a directory of unit files")
        try:
            return load_unit_set(directory.resolve())
        except UnitFileError as err:
            for problem in err.problems:
                print(problem, file=sys.stderr)
            raise UnitFileError(err.problems) from None

    def _make_plan(self, units: UnitSet) -> tuple[Launcher, Plan]:
        choice = self.args.launcher
        if choice == "auto":
            choice = "slurm" if os.environ.get("SLURM_JOB_ID") else "local"
        self.launcher_name = choice
        gpus = self.args.gpus_per_node
        if choice == "local":
            if gpus is None:
                gpus = detect_gpus() or 0
            nodes = local_nodes(self.args.nodes or 1, gpus)
            launcher: Launcher = LocalLauncher(gpus_per_node=gpus)
            plan = make_plan(units, nodes, client=nodes[0].name, shared_address=True)
            return launcher, plan
        nodelist = os.environ.get("SLURM_JOB_NODELIST")
        if not nodelist:
            raise UsageError("--launcher slurm needs a Slurm allocation (SLURM_JOB_NODELIST unset)")
        if gpus is None:
            gpus = detect_gpus()
            if gpus is None:
                raise UsageError("cannot detect GPUs per node: pass --gpus-per-node")
        hosts = slurm_hostnames(nodelist)
        if self.args.nodes is not None:
            hosts = hosts[: self.args.nodes]
        addresses = slurm_node_addresses(hosts)
        nodes = [Node(name=h, address=addresses[h], gpus=tuple(range(gpus))) for h in hosts]
        shared = len(set(addresses.values())) < len(addresses)
        srun_args = tuple(self.args.srun_arg) + tuple(
            a for u in units.lanes for a in u.slurm.srun_args
        )
        client = os.environ.get("SLURMD_NODENAME") or hosts[0]
        if client not in addresses:
            raise UsageError(f"ddsup start runs on {client}, which is not in the allocation")
        self.client_address = addresses[client]
        plan = make_plan(
            units, nodes, client=client, shared_address=shared, endpoint_host="127.0.0.1"
        )
        launcher = SlurmLauncher(gpus_per_node=gpus, srun_args=srun_args, shared_address=shared)
        return launcher, plan

    def _write_run_json(self) -> None:
        data = {
            "invocation_id": self.invocation_id,
            "pid": os.getpid(),
            "launcher": self.launcher_name,
            "unit_dir": str(Path(self.args.directory).resolve()),
            "started_at": self.started,
            "control": None
            if self.control_port is None
            else {
                "host": "127.0.0.1",
                "port": self.control_port,
            },
            "containment": self.containment,
        }
        self.state.write_json(self.state.run, data)

    # --- supervision ----------------------------------------------------------------
    async def _supervise(self, units: UnitSet, plan: Plan, launcher: Launcher) -> None:
        # ddsup:containment (issue 15): every no-orphan layer, opened once, closed at the end
        async with open_containment(
            self.invocation_id, state_dir=self.state.path, name="controller", root=True
        ) as containment:
            self._contained(containment)  # ddsup:containment
            async with trio.open_nursery() as nursery:
                self._background = nursery
                nursery.start_soon(self._watch_signals, units)
                nursery.start_soon(self.console.run)
                host = "127.0.0.1" if launcher.name == "local" else "0.0.0.0"
                self.control_port = await nursery.start(
                    lambda task_status: serve_channel(
                        self._on_connection, self.secret, host=host, task_status=task_status
                    )
                )
                write_private(self.state.secret, self.secret + "\n")
                self._write_run_json()
                async with trio.open_nursery() as services:
                    self.local = NodeRunner(
                        units=units,
                        plan=plan,
                        run=self._run_context(plan, with_key=True),
                        state=self.state,
                        nursery=services,
                        emit=self._event,
                        extra_args=self._endpoint_args(units, plan),
                        extra_env=self._endpoint_env(plan),
                    )
                    try:
                        await self._run(units, plan, launcher, services)
                    finally:
                        with trio.CancelScope(shield=True):
                            await self._stop_everything(units, plan)
                        services.cancel_scope.cancel()
                nursery.cancel_scope.cancel()
        if containment.survivors:  # ddsup:containment
            details = {"pids": containment.survivors}
            self._event(Event("run", reason="sweep left survivors", details=details))

    def _contained(self, containment: Containment) -> None:  # ddsup:containment
        """Record which no-orphan layers hold here (run.json for status, and an event)."""
        assert containment.layers is not None
        self.containment = containment.layers.to_json()
        self._write_run_json()
        layers = containment.layers
        self._event(Event("containment", reason=layers.summary(), details=layers.to_json()))

    async def _run(
        self, units: UnitSet, plan: Plan, launcher: Launcher, services: trio.Nursery
    ) -> None:
        """Start everything in order, then wait until something ends the run."""
        async with trio.open_nursery() as starters:
            starters.start_soon(self._start_all, units, plan, launcher, starters)
            await self.ending.wait()
            starters.cancel_scope.cancel()

    async def _start_all(
        self, units: UnitSet, plan: Plan, launcher: Launcher, nursery: trio.Nursery
    ) -> None:
        try:
            await self._launch_agents(plan, launcher, nursery)
        except DdsupError as err:
            self._end(Outcome(err.result_status, err.exit_status, None, str(err)))
            return
        for planned in plan.instances:
            self.ready.setdefault(planned.instance, trio.Event())
            self.final.setdefault(planned.instance, trio.Event())
        for planned in plan.instances:
            nursery.start_soon(self._start_when_due, units, plan, planned)

    async def _start_when_due(self, units: UnitSet, plan: Plan, planned: PlannedInstance) -> None:
        await self._dependencies_ready(units, plan, planned)
        if self.stopping:
            return
        if self._on_agent(planned):
            channel = self.agents.get(planned.node)
            if channel is not None:
                await channel.send({"op": "start", "instances": [{"instance": planned.instance}]})
        else:
            assert self.local is not None
            self.local.start(planned.instance)

    async def _dependencies_ready(
        self, units: UnitSet, plan: Plan, planned: PlannedInstance
    ) -> None:
        for name in start_after(units, plan, planned):
            await self.ready[name].wait()
        if planned.type is UnitType.ENDPOINT:
            await self._min_ready_lanes(units, plan)

    async def _min_ready_lanes(self, units: UnitSet, plan: Plan) -> None:
        """Until ``min_ready`` lanes of every model are ready (the endpoint's quorum)."""
        endpoint = units.endpoint
        assert endpoint is not None
        section = endpoint.endpoint or EndpointSection()
        for instances in lanes_by_model(units, plan).values():
            need = section.min_ready.required(len(instances))
            while True:
                changed = self._changed
                if sum(1 for i in instances if self._is_ready(i)) >= need:
                    break
                await changed.wait()

    def _is_ready(self, instance: str) -> bool:
        return self.states.get(instance, {}).get("to") == "ready"

    def _notify_changed(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    # --- agents ---------------------------------------------------------------------
    async def _launch_agents(self, plan: Plan, launcher: Launcher, nursery: trio.Nursery) -> None:
        nodes = sorted(
            {i.node for i in plan.instances if self._on_agent(i)},
            key=[n.name for n in plan.nodes].index,
        )
        if not nodes:
            return
        env = {
            **os.environ,
            INVOCATION_ENV: self.invocation_id,
            ADDRESS_ENV: f"{self._control_host(launcher)}:{self.control_port}",
            SECRET_ENV: self.secret,
        }
        self.expected_agents = set(nodes)
        self.agent_processes = await launcher.launch(nodes, env, self.state)
        for agent in self.agent_processes:
            nursery.start_soon(self._watch_agent_process, agent)
        with trio.move_on_after(PREFLIGHT_TIMEOUT):
            await self.preflight_done.wait()
        missing = set(nodes) - set(self.preflight)
        if missing:
            raise PreflightError(
                f"no agent reported from node(s) {', '.join(sorted(missing))} within {PREFLIGHT_TIMEOUT:g}s"
            )
        problems = [
            f"{node}: {p}" for node, r in sorted(self.preflight.items()) for p in r["problems"]
        ]
        if problems:
            raise PreflightError("preflight failed: " + "; ".join(problems))
        ports = {k: v for r in self.preflight.values() for k, v in r["ports"].items()}
        if ports:
            self.plan = plan = plan.with_ports(ports)
            write_private(self.state.plan, plan.to_json())
            if self.local is not None:
                self.local.plan = plan

    def _on_agent(self, planned: PlannedInstance) -> bool:
        assert self.units is not None
        return runs_on_agent(self.units, planned)

    def _control_host(self, launcher: Launcher) -> str:
        if launcher.name == "local":
            return "127.0.0.1"
        return os.environ.get("DDSUP_CONTROL_HOST") or self.client_address

    async def _watch_agent_process(self, agent: AgentProcess) -> None:
        status = await agent.process.wait()
        if not self.stopping:
            self._end(
                _outcome.unit_failed(
                    agent.label,
                    f"{agent.label} exited unexpectedly ({status.describe()})",
                    status.to_json(),
                    False,
                )
            )

    async def _on_connection(self, channel: Channel, hello: dict[str, Any]) -> None:
        role = hello.get("role")
        if role == "agent":
            await self._serve_agent(channel, str(hello.get("node")))
        elif role == "lanes":
            await self.lane_feed.serve(channel)
        elif role == "control":
            await self._serve_control(channel)

    async def _serve_agent(self, channel: Channel, node: str) -> None:
        assert self.plan is not None
        run = dataclasses.asdict(self._run_context(self.plan, with_key=False))
        await channel.send({"op": "setup", "plan": self.plan.to_dict(), "run": run})
        self.agents[node] = channel
        if self.stopping:  # connected after the stop began: nothing for it to run
            await channel.send({"op": "shutdown"})
        try:
            while True:
                message = await channel.receive()
                if message is None:
                    break
                if message.get("op") == "preflight":
                    self.preflight[node] = message
                    if set(self.preflight) >= self.expected_agents:
                        self.preflight_done.set()
                elif message.get("op") == "event":
                    self._event(Event.from_dict(message["event"]))
                elif message.get("op") == "signalled":
                    name = signal.Signals(int(message["signal"])).name
                    reason = f"the agent on {node} received {name}"
                    self._end(_outcome.stopped(int(message["signal"]), reason))
                elif message.get("op") == "stopped":
                    break
        except ChannelError as err:
            if not self.stopping:
                self._end(
                    _outcome.unit_failed(
                        f"agent on {node}", f"lost the agent on {node}: {err}", None, False
                    )
                )
        finally:
            self.agents.pop(node, None)
            self._agent_gone(node)
        if not self.stopping:
            self._end(
                _outcome.unit_failed(
                    f"agent on {node}", f"the agent on {node} went away", None, False
                )
            )

    def _agent_gone(self, node: str) -> None:
        """An agent's instances can report nothing more: count them as final."""
        assert self.plan is not None
        for planned in self.plan.on_node(node):
            if self._on_agent(planned):
                self.final.setdefault(planned.instance, trio.Event()).set()

    # --- events ---------------------------------------------------------------------
    def _event(self, event: Event) -> None:
        self.events.write(event)
        self.console.event(event)
        if event.event != "unit" or event.instance is None:
            return
        record = self.states.setdefault(event.instance, {})
        if "pid" not in event.details:
            record.pop("pid", None)
        record.update(event.to_dict())
        self._notify_changed()
        instance = event.instance
        if event.to_state in ("restarting", "failed") and not self.stopping:
            self._take_down_replica_peers(instance, stop=event.to_state == "failed")
        if event.to_state == "ready" or (
            event.to_state == "exited" and event.reason == "completed"
        ):
            self.ready.setdefault(instance, trio.Event()).set()
        if event.to_state in ("exited", "failed"):
            self.final.setdefault(instance, trio.Event()).set()
            self._on_final(event)
        self._publish_lanes()

    def _take_down_replica_peers(self, instance: str, *, stop: bool) -> None:
        """A multi-node replica lives and dies as one.

        torch.distributed cannot continue with a rank missing: when one rank restarts, the
        others get kill_signal and go through their own restart policy (same unit, same
        policy), so the replica restarts as a whole; when one fails for good, the others
        are stopped, so it fails as a whole.
        """
        assert self.plan is not None and self.units is not None
        replica = instance.split(":", 1)[0]
        peers = [
            p
            for p in self.plan.instances
            if p.replica_name == replica
            and p.instance != instance
            and p.nnodes > 1
            and self.states.get(p.instance, {}).get("to") in ("starting", "ready")
        ]
        for peer in peers:
            channel = self.agents.get(peer.node)
            sig = int(self.units.by_name(peer.unit).service.kill_signal)
            if channel is None:
                continue
            if stop:
                self._send_soon(channel, {"op": "stop", "instances": [peer.instance]})
            else:
                message = {"op": "signal", "instances": [peer.instance], "signal": sig}
                self._send_soon(channel, message)

    def _on_final(self, event: Event) -> None:
        assert self.units is not None and self.plan is not None and event.instance is not None
        if self.stopping:
            return
        planned = next((i for i in self.plan.instances if i.instance == event.instance), None)
        if planned is None:
            return
        unit = self.units.by_name(planned.unit)
        exit_json = event.details.get("exit")
        if unit.type is UnitType.WORKER:
            self._end(_outcome.worker_ended(event.instance, exit_json, event.reason or ""))
            return
        if event.to_state == "failed":
            if unit.service.on_failure is OnFailure.STOP_ALL:
                self._end(
                    _outcome.unit_failed(
                        event.instance,
                        event.reason or "failed",
                        exit_json,
                        bool(event.details.get("readiness_timeout")),
                    )
                )
            else:
                self._stop_requirers(unit.base_name)

    def _stop_requirers(self, failed_unit: str) -> None:
        assert self.units is not None and self.plan is not None
        for unit in self.units.units:
            if failed_unit in unit.requires:
                for planned in self.plan.instances:
                    if planned.unit == unit.name:
                        self._request_stop_instance(planned)

    def _request_stop_instance(self, planned: PlannedInstance) -> None:
        channel = self.agents.get(planned.node)
        if channel is not None and self._on_agent(planned):
            self._send_soon(channel, {"op": "stop", "instances": [planned.instance]})
        elif self.local is not None and planned.instance in self.local.services:
            self.local.services[planned.instance].request_stop("a required unit failed")

    def _send_soon(self, channel: Channel, message: dict[str, Any]) -> None:
        async def send() -> None:
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                await channel.send(message)

        if self._background is not None:
            self._background.start_soon(send)

    def _end(self, outcome: Outcome) -> None:
        if self.outcome is None:
            self.outcome = outcome
            self._event(Event("run", reason="ending", details=outcome.to_dict()))
        self.ending.set()

    # --- lane feed for the endpoint -------------------------------------------------
    def _ready_lanes(self) -> list[dict[str, str]]:
        if self.plan is None or self.units is None:
            return []
        lanes = []
        for planned in self.plan.instances:
            if (
                planned.type is UnitType.LANE
                and not planned.rank
                and self._is_ready(planned.instance)
            ):
                lane = self.units.by_name(planned.unit).lane
                assert lane is not None
                address = self.plan.node(planned.node).address
                lanes.append(
                    {
                        "instance": planned.instance,
                        "model": lane.model,
                        "url": f"http://{address}:{planned.port}",
                    }
                )
        return lanes

    @staticmethod
    def _lane_models(units: UnitSet, plan: Plan) -> dict[str, str]:
        """Serving lane instance → model, for the console and status."""
        return {
            instance: model
            for model, instances in lanes_by_model(units, plan).items()
            for instance in instances
        }

    def _models(self) -> list[str]:
        return sorted({u.lane.model for u in self.units.lanes if u.lane}) if self.units else []

    def _publish_lanes(self) -> None:
        self.lane_feed.publish(self._ready_lanes(), self._models())

    # --- operator control -----------------------------------------------------------
    async def _serve_control(self, channel: Channel) -> None:
        while True:
            message = await channel.receive()
            if message is None:
                return
            op = message.get("op")
            if op == "status":
                await channel.send({"op": "status", **self.status_snapshot()})
            elif op == "stop":
                self._end(_outcome.stopped(signal.SIGTERM, "ddsup stop"))
                await channel.send({"op": "stopping"})

    def status_snapshot(self) -> dict[str, Any]:
        instances = []
        models = self._lane_models(self.units, self.plan) if self.units and self.plan else {}
        for planned in self.plan.instances if self.plan else ():
            record = self.states.get(planned.instance, {})
            instances.append(
                {
                    "instance": planned.instance,
                    "unit": planned.unit,
                    "type": planned.type.value,
                    "node": planned.node,
                    "gpus": list(planned.gpus),
                    "port": planned.port,
                    "state": record.get("to", "inactive"),
                    "since": record.get("time"),
                    "pid": record.get("pid"),
                    "restarts": record.get("restarts", 0),
                    "last_exit": record.get("exit"),
                    "reason": record.get("reason"),
                    "model": models.get(planned.instance),
                }
            )
        return {
            "invocation_id": self.invocation_id,
            "launcher": self.launcher_name,
            "started_at": self.started,
            "uptime": time.time() - self.started,
            "state_dir": str(self.state.path),
            "stopping": self.stopping,
            "instances": instances,
        }

    # --- signals --------------------------------------------------------------------
    async def _watch_signals(self, units: UnitSet) -> None:
        forwarded = {s for u in units.units for s in u.service.forward_signals}
        wanted = set(STOP_SIGNALS) | forwarded | {signal.SIGUSR1, signal.SIGUSR2}
        stop_signals = 0
        # Whatever arrives after this receiver closes (final sweep, result.json, exit) must
        # not kill ddsup half-way: the receiver restores these dispositions on exit, and
        # ignoring is right then. (Children exec'd meanwhile get defaults: the receiver's
        # handlers, not SIG_IGN, are installed while they are spawned.)
        for stop in STOP_SIGNALS:
            signal.signal(stop, signal.SIG_IGN)
        with trio.open_signal_receiver(*wanted) as signals:
            async for signum in signals:
                if signum in forwarded:
                    self._forward(units, signum)
                elif signum in STOP_SIGNALS:
                    if stop_signals:
                        self._kill_everything()  # a second stop signal: no more grace
                    stop_signals += 1
                    self._end(_outcome.stopped(signum, f"received {signal.Signals(signum).name}"))

    def _forward(self, units: UnitSet, signum: int) -> None:
        assert self.plan is not None
        self._event(Event("run", reason=f"forwarding {signal.Signals(signum).name}"))
        targets = [
            i
            for i in self.plan.instances
            if signum in units.by_name(i.unit).service.forward_signals
        ]
        for node, channel in self.agents.items():
            names = [i.instance for i in targets if i.node == node]
            if names:
                self._send_soon(
                    channel, {"op": "signal", "instances": names, "signal": int(signum)}
                )
        if self.local is not None:
            self.local.signal([i.instance for i in targets], signum)

    def _kill_everything(self) -> None:
        if self.killing:
            return
        self.killing = True
        self._event(Event("run", reason="second stop signal: killing everything"))
        if self.local is not None:
            self.local.kill_all()
        for channel in self.agents.values():
            self._send_soon(channel, {"op": "kill"})
        for agent in self.agent_processes:
            if not set(agent.nodes) & set(self.agents):
                agent.process.signal_group(signal.SIGKILL)  # not connected: nothing to ask

    # --- stop sequence --------------------------------------------------------------
    async def _stop_everything(self, units: UnitSet, plan: Plan) -> None:
        self.stopping = True
        self._event(Event("run", reason="stopping"))
        plan = self.plan or plan
        for level in stop_levels(units, plan):
            await self._stop_level(level)
        await self._shutdown_agents()

    async def _stop_level(self, level: list[PlannedInstance]) -> None:
        assert self.local is not None and self.units is not None
        remote = [p for p in level if self._on_agent(p) and p.node in self.agents]
        for node in {p.node for p in remote}:
            names = [p.instance for p in remote if p.node == node]
            self._send_soon(self.agents[node], {"op": "stop", "instances": names})
        local = [p.instance for p in level if p.instance in self.local.services]
        limit = max((self.units.by_name(p.unit).service.timeout_stop for p in level), default=0.0)
        with trio.move_on_after(limit + AGENT_SHUTDOWN_GRACE):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self.local.stop, local)
                for planned in remote:
                    if planned.instance in self.states:
                        nursery.start_soon(self.final[planned.instance].wait)

    async def _shutdown_agents(self) -> None:
        """Connected agents stop their units and exit; the rest are ended at once.

        An agent that never connected (a stop during its start-up) has started nothing,
        so waiting for it would only delay the stop: it gets SIGTERM straight away.
        """
        connected = set(self.agents)
        for channel in list(self.agents.values()):
            self._send_soon(channel, {"op": "shutdown"})

        async def finish(agent: AgentProcess) -> None:
            if connected & set(agent.nodes) and not self.killing:
                with trio.move_on_after(AGENT_SHUTDOWN_GRACE):
                    await agent.process.wait()
            await agent.process.stop(signal.SIGTERM, 5.0)

        async with trio.open_nursery() as nursery:
            for agent in self.agent_processes:
                nursery.start_soon(finish, agent)

    # --- helpers --------------------------------------------------------------------
    def _run_context(self, plan: Plan, *, with_key: bool) -> RunContext:
        api_key = None
        endpoint = self.units.endpoint if self.units else None
        if with_key and endpoint and endpoint.endpoint and endpoint.endpoint.api_key_env:
            api_key = os.environ.get(endpoint.endpoint.api_key_env)
        return RunContext(
            invocation_id=self.invocation_id,
            state_dir=str(self.state.path),
            unit_dir=str(Path(self.args.directory).resolve()),
            job_id=os.environ.get("SLURM_JOB_ID", self.invocation_id[:12]),
            endpoint_url=plan.endpoint_url,
            api_key=api_key,
        )

    def _endpoint_env(self, plan: Plan) -> dict[str, dict[str, str]]:
        """The endpoint alone gets the control address and secret, for its lane feed."""
        feed = {ADDRESS_ENV: f"127.0.0.1:{self.control_port}", SECRET_ENV: self.secret}
        return {i.instance: feed for i in plan.instances if i.type is UnitType.ENDPOINT}

    def _endpoint_args(self, units: UnitSet, plan: Plan) -> dict[str, tuple[str, ...]]:
        endpoint = units.endpoint
        if endpoint is None or endpoint.endpoint is None:
            return {}
        section = endpoint.endpoint
        args = [
            "--bind",
            section.bind,
            "--port",
            str(section.port),
            "--max-queue-per-lane",
            str(section.max_queue_per_lane),
            "--retry-after",
            f"{section.retry_after:g}s",
            "--retries",
            str(section.retries),
            "--max-body-bytes",
            str(section.max_body_bytes),
            "--max-concurrent",
            str(section.max_concurrent),
            "--upstream-timeout",
            f"{section.upstream_timeout:g}s",
            "--lanes-from-controller",
        ]
        if section.api_key_env:
            if not os.environ.get(section.api_key_env):
                raise UsageError(
                    f"{endpoint.source.path}: api_key_env names {section.api_key_env}, which is not set"
                )
            args += ["--api-key-env", section.api_key_env]
        names = [i.instance for i in plan.instances if i.type is UnitType.ENDPOINT]
        return {name: tuple(args) for name in names}
