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
import os
import signal
import sys
import time
import uuid
from pathlib import Path

import trio

from ddsup._errors import DdsupError, PreflightError, ResultStatus, UnitFileError, UsageError
from ddsup.channel._channel import ADDRESS_ENV, SECRET_ENV, Channel, new_secret, serve_channel
from ddsup.channel._messages import (
    AgentStopped,
    ChannelError,
    EndpointSetup,
    EventReport,
    Hello,
    Kill,
    LanesUpdate,
    Message,
    PreflightReport,
    ReadyLane,
    Role,
    Setup,
    Shutdown,
    SignalInstances,
    Signalled,
    Start,
    StatusReply,
    StatusRequest,
    Stop,
    StopAnswer,
    StopRequest,
)
from ddsup.plan import (
    AllocationRequest,
    LauncherChoice,
    LauncherKind,
    plan_for,
    resolve_allocation,
)
from ddsup.plan._model import Plan, PlannedInstance
from ddsup.process import become_subreaper, reap_adopted_children, start_sentinel, sweep_until_gone
from ddsup.record._events import (
    EventLog,
    KillingEverything,
    ProcessStarted,
    RecordedEvent,
    RunEnding,
    RunFinished,
    RunStarting,
    RunStopping,
    SignalForwarded,
    SweepLeftSurvivors,
    UnitTransition,
)
from ddsup.record._instance import InstanceRecord
from ddsup.record._outcome import Cause, Outcome, Stopped, UnitFailure, WorkerEnded
from ddsup.record._state_dir import ControlAddress, RunInfo, StateDir, write_private
from ddsup.record._states import RUNNING, InstanceState
from ddsup.record._status import InstanceStatus, RunSnapshot
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
        self.states: dict[str, InstanceRecord] = {}
        self.ready: dict[str, trio.Event] = {}
        self.final: dict[str, trio.Event] = {}
        self.agents: dict[str, Channel] = {}
        self.preflight: dict[str, PreflightReport] = {}
        self.preflight_done = trio.Event()
        self.lane_feed: LanePublisher | None = None
        self.agent_processes: list[AgentProcess] = []
        self.units: UnitSet | None = None
        self.plan: Plan | None = None
        self.local: NodeRunner | None = None
        self.launcher_name = "local"
        self.control_port: int | None = None
        self.expected_agents: set[str] = set()
        self.client_address = "127.0.0.1"
        self._background: trio.Nursery | None = None  # owns fire-and-forget sends
        self._changed = trio.Event()

    # --- top level ------------------------------------------------------------------
    async def main(self) -> int:
        self._write_run_json()
        self._event(RunStarting(invocation_id=self.invocation_id))
        try:
            units = self._load_units()
            launcher, plan = self._make_plan(units)
            self.units, self.plan = units, plan
            self.lane_feed = LanePublisher(_endpoint_setup(units))
            self.console.lanes(self._lane_models(units, plan))
            write_private(self.state.plan, plan.to_json())
            await self._supervise(units, plan, launcher)
        except DdsupError as err:
            self._end(err)
            self.console.error(str(err))
        outcome = self.outcome or Outcome(ResultStatus.STOPPED, 1, None, "ended without a cause")
        self.state.write_json(self.state.result, outcome.to_dict())
        self._event(RunFinished(outcome=outcome))
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
        request = AllocationRequest(
            launcher=LauncherChoice(self.args.launcher),
            nodes=self.args.nodes,
            gpus_per_node=self.args.gpus_per_node,
        )
        allocation = resolve_allocation(request, os.environ)
        self.launcher_name = allocation.launcher.value
        self.client_address = allocation.client_address
        plan = plan_for(units, allocation)
        launcher: Launcher
        if allocation.launcher is LauncherKind.LOCAL:
            launcher = LocalLauncher(gpus_per_node=allocation.gpus_per_node)
        else:
            srun_args = tuple(self.args.srun_arg) + tuple(
                a for u in units.lanes for a in u.slurm.srun_args
            )
            launcher = SlurmLauncher(
                gpus_per_node=allocation.gpus_per_node,
                srun_args=srun_args,
                shared_address=allocation.shared_address,
            )
        return launcher, plan

    def _write_run_json(self) -> None:
        control = None
        if self.control_port is not None:
            control = ControlAddress("127.0.0.1", self.control_port)
        data = RunInfo(
            invocation_id=self.invocation_id,
            pid=os.getpid(),
            launcher=self.launcher_name,
            unit_dir=str(Path(self.args.directory).resolve()),
            started_at=self.started,
            control=control,
        )
        self.state.write_json(self.state.run, data.to_json())

    # --- supervision ----------------------------------------------------------------
    async def _supervise(self, units: UnitSet, plan: Plan, launcher: Launcher) -> None:
        become_subreaper()
        sentinel = start_sentinel(self.invocation_id)
        try:
            async with trio.open_nursery() as nursery:
                self._background = nursery
                nursery.start_soon(reap_adopted_children)
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
        finally:
            with trio.CancelScope(shield=True):
                survivors = await sweep_until_gone(self.invocation_id, timeout=5.0)
                if survivors:
                    self._event(SweepLeftSurvivors(pids=tuple(survivors)))
                sentinel.close()

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
            self._end(err)
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
                await channel.send(Start((planned.instance,)))
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
        record = self.states.get(instance)
        return record is not None and record.state is InstanceState.READY

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
            f"{node}: {p}" for node, r in sorted(self.preflight.items()) for p in r.problems
        ]
        if problems:
            raise PreflightError("preflight failed: " + "; ".join(problems))
        ports = {k: v for r in self.preflight.values() for k, v in r.ports.items()}
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
            reason = f"{agent.label} exited unexpectedly ({status.describe()})"
            self._end(UnitFailure(agent.label, reason, status))

    async def _on_connection(self, channel: Channel, hello: Hello) -> None:
        if hello.role is Role.AGENT and hello.node is not None:
            await self._serve_agent(channel, hello.node)
        elif hello.role is Role.LANES and self.lane_feed is not None:
            await self.lane_feed.serve(channel)
        elif hello.role is Role.CONTROL:
            await self._serve_control(channel)

    async def _serve_agent(self, channel: Channel, node: str) -> None:
        assert self.plan is not None
        run = self._run_context(self.plan, with_key=False)
        setup = Setup(
            plan=self.plan,
            invocation_id=run.invocation_id,
            state_dir=run.state_dir,
            unit_dir=run.unit_dir,
            job_id=run.job_id,
            endpoint_url=run.endpoint_url,
        )
        await channel.send(setup)
        self.agents[node] = channel
        if self.stopping:  # connected after the stop began: nothing for it to run
            await channel.send(Shutdown())
        try:
            while True:
                message = await channel.receive()
                if message is None or isinstance(message, AgentStopped):
                    break
                if isinstance(message, PreflightReport):
                    self.preflight[node] = message
                    if set(self.preflight) >= self.expected_agents:
                        self.preflight_done.set()
                elif isinstance(message, EventReport):
                    self._event(message.event)
                elif isinstance(message, Signalled):
                    name = signal.Signals(message.signum).name
                    reason = f"the agent on {node} received {name}"
                    self._end(Stopped(message.signum, reason))
                else:
                    raise ChannelError(f"unexpected {message.op!r} message from an agent")
        except ChannelError as err:
            if not self.stopping:
                self._end(UnitFailure(f"agent on {node}", f"lost the agent on {node}: {err}"))
        finally:
            self.agents.pop(node, None)
            self._agent_gone(node)
        if not self.stopping:
            self._end(UnitFailure(f"agent on {node}", f"the agent on {node} went away"))

    def _agent_gone(self, node: str) -> None:
        """An agent's instances can report nothing more: count them as final."""
        assert self.plan is not None
        for planned in self.plan.on_node(node):
            if self._on_agent(planned):
                self.final.setdefault(planned.instance, trio.Event()).set()

    # --- events ---------------------------------------------------------------------
    def _event(self, event: RecordedEvent) -> None:
        self.events.write(event)
        self.console.event(event)
        if isinstance(event, ProcessStarted):
            record = self.states.get(event.instance, InstanceRecord())
            self.states[event.instance] = record.apply(event)
        if not isinstance(event, UnitTransition):
            return
        instance = event.instance
        self.states[instance] = self.states.get(instance, InstanceRecord()).apply(event)
        self._notify_changed()
        to = event.to_state
        if to in (InstanceState.RESTARTING, InstanceState.FAILED) and not self.stopping:
            self._take_down_replica_peers(instance, stop=to is InstanceState.FAILED)
        if to is InstanceState.READY or event.completed:
            self.ready.setdefault(instance, trio.Event()).set()
        if to.final:
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
            and self.states.get(p.instance, InstanceRecord()).state in RUNNING
        ]
        for peer in peers:
            channel = self.agents.get(peer.node)
            sig = int(self.units.by_name(peer.unit).service.kill_signal)
            if channel is None:
                continue
            if stop:
                self._send_soon(channel, Stop((peer.instance,)))
            else:
                self._send_soon(channel, SignalInstances((peer.instance,), sig))

    def _on_final(self, event: UnitTransition) -> None:
        assert self.units is not None and self.plan is not None
        if self.stopping:
            return
        planned = next((i for i in self.plan.instances if i.instance == event.instance), None)
        if planned is None:
            return
        unit = self.units.by_name(planned.unit)
        if unit.type is UnitType.WORKER:
            self._end(WorkerEnded(event.instance, event.exit, event.reason))
            return
        if event.to_state is InstanceState.FAILED:
            if unit.service.on_failure is OnFailure.STOP_ALL:
                failure = UnitFailure(
                    event.instance, event.reason, event.exit, event.readiness_timeout
                )
                self._end(failure)
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
            self._send_soon(channel, Stop((planned.instance,), "a required unit failed"))
        elif self.local is not None and planned.instance in self.local.services:
            self.local.services[planned.instance].request_stop("a required unit failed")

    def _send_soon(self, channel: Channel, message: Message) -> None:
        async def send() -> None:
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                await channel.send(message)

        if self._background is not None:
            self._background.start_soon(send)

    def _end(self, cause: Cause) -> None:
        if self.outcome is None:
            self.outcome = Outcome.of(cause)
            self._event(RunEnding(outcome=self.outcome))
        self.ending.set()

    # --- lane feed for the endpoint -------------------------------------------------
    def _ready_lanes(self) -> list[ReadyLane]:
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
                url = f"http://{address}:{planned.port}"
                lanes.append(ReadyLane(planned.instance, lane.model, url))
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
        if self.lane_feed is not None:
            update = LanesUpdate(tuple(self._ready_lanes()), tuple(self._models()))
            self.lane_feed.publish(update)

    # --- operator control -----------------------------------------------------------
    async def _serve_control(self, channel: Channel) -> None:
        while True:
            message = await channel.receive()
            if message is None:
                return
            if isinstance(message, StatusRequest):
                await channel.send(StatusReply(self.status_snapshot()))
            elif isinstance(message, StopRequest):
                self._end(Stopped(signal.SIGTERM, "ddsup stop"))
                await channel.send(StopAnswer())
            else:
                raise ChannelError(f"unexpected {message.op!r} message from an operator")

    def status_snapshot(self) -> RunSnapshot:
        instances = []
        models = self._lane_models(self.units, self.plan) if self.units and self.plan else {}
        for planned in self.plan.instances if self.plan else ():
            row = InstanceStatus(
                planned.instance,
                planned.unit,
                planned.type,
                planned.node,
                planned.gpus,
                planned.port,
                models.get(planned.instance),
            )
            instances.append(row.with_record(self.states.get(planned.instance, InstanceRecord())))
        return RunSnapshot(
            invocation_id=self.invocation_id,
            launcher=self.launcher_name,
            started_at=self.started,
            uptime=time.time() - self.started,
            state_dir=str(self.state.path),
            stopping=self.stopping,
            instances=tuple(instances),
        )

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
                    self._end(Stopped(signum, f"received {signal.Signals(signum).name}"))

    def _forward(self, units: UnitSet, signum: int) -> None:
        assert self.plan is not None
        self._event(SignalForwarded(signum=signum))
        targets = [
            i
            for i in self.plan.instances
            if signum in units.by_name(i.unit).service.forward_signals
        ]
        for node, channel in self.agents.items():
            names = [i.instance for i in targets if i.node == node]
            if names:
                self._send_soon(channel, SignalInstances(tuple(names), int(signum)))
        if self.local is not None:
            self.local.signal([i.instance for i in targets], signum)

    def _kill_everything(self) -> None:
        if self.killing:
            return
        self.killing = True
        self._event(KillingEverything())
        if self.local is not None:
            self.local.kill_all()
        for channel in self.agents.values():
            self._send_soon(channel, Kill())
        for agent in self.agent_processes:
            if not set(agent.nodes) & set(self.agents):
                agent.process.signal_group(signal.SIGKILL)  # not connected: nothing to ask

    # --- stop sequence --------------------------------------------------------------
    async def _stop_everything(self, units: UnitSet, plan: Plan) -> None:
        self.stopping = True
        self._event(RunStopping())
        plan = self.plan or plan
        for level in stop_levels(units, plan):
            await self._stop_level(level)
        await self._shutdown_agents()

    async def _stop_level(self, level: list[PlannedInstance]) -> None:
        assert self.local is not None and self.units is not None
        remote = [p for p in level if self._on_agent(p) and p.node in self.agents]
        for node in {p.node for p in remote}:
            names = [p.instance for p in remote if p.node == node]
            self._send_soon(self.agents[node], Stop(tuple(names)))
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
            self._send_soon(channel, Shutdown())

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
        """The endpoint takes its settings and lanes from the controller's feed."""
        names = [i.instance for i in plan.instances if i.type is UnitType.ENDPOINT]
        return {name: ("--lanes-from-controller",) for name in names}


def _endpoint_setup(units: UnitSet) -> EndpointSetup | None:
    """The endpoint's section, checked: its ``api_key_env`` must name a set variable."""
    endpoint = units.endpoint
    if endpoint is None or endpoint.endpoint is None:
        return None
    section = endpoint.endpoint
    if section.api_key_env and not os.environ.get(section.api_key_env):
        raise UsageError(
            f"{endpoint.source.path}: api_key_env names {section.api_key_env}, which is not set"
        )
    return EndpointSetup(section)
