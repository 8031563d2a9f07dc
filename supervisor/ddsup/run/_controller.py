"""``ddsup start``: the controller of one run, a thin trio shell around :class:`RunState`.

Order: plan → state dir → agents (preflight on every node) → lanes (staggered per node) →
endpoint once ``min_ready`` lanes of each model are ready → worker. Everything that
decides (what starts when, what a failure means, which cause ends the run) is in
``RunState``; the controller feeds it inputs (events of its own services and of the
agents, preflight reports, signals, operators) and carries its decisions out on the
nodes (``_nodes``). Once the run ends, everything stops in reverse dependency order
(instances of one level in parallel), the agents shut down, and a sweep by invocation id
removes whatever escaped. ``result.json`` is written on every path.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import uuid
from functools import partial
from typing import Any

import trio

from ddsup._errors import DdsupError, ResultStatus, UnitFileError, UsageError
from ddsup.channel._channel import ADDRESS_ENV, SECRET_ENV, new_secret, serve_channel
from ddsup.channel._messages import Setup
from ddsup.plan._resolve import Allocation, LauncherKind, plan_for, resolve_allocation
from ddsup.process import Containment, open_containment
from ddsup.record._efficiency import efficiency_line
from ddsup.record._events import (
    Contained,
    EventLog,
    RecordedEvent,
    RunEnding,
    RunFinished,
    RunStarting,
    SweepLeftSurvivors,
)
from ddsup.record._outcome import Outcome
from ddsup.record._state_dir import ControlAddress, RunInfo, StateDir, write_private
from ddsup.record._status import RunSnapshot
from ddsup.run._agent_setup import agent_env, agent_setup
from ddsup.run._agents import AgentFleet
from ddsup.run._connections import ControlServer
from ddsup.run._console import Console
from ddsup.run._lane_feed import LanePublisher, endpoint_setup
from ddsup.run._launcher import launcher_for
from ddsup.run._node_runner import NodeRunner
from ddsup.run._nodes import LocalNode, RunNode
from ddsup.run._open_files import ensure_open_files, open_files_needed
from ddsup.run._options import RunOptions, Verbosity
from ddsup.run._run_inputs import (
    Decision,
    EndRun,
    Host,
    Input,
    KillEverything,
    Observed,
    PlanPorted,
    PreflightOver,
    PreflightReported,
    PublishLanes,
    Record,
    SignalOn,
    SignalToForward,
    StartOn,
    StartupFailed,
    StopBegins,
    StopOn,
    StopSignalled,
)
from ddsup.run._run_state import RunState
from ddsup.run._signals import STOP_SIGNALS, stop_signal_receiver
from ddsup.service._environment import RunContext
from ddsup.units import load_unit_set, printable
from ddsup.units._model import UnitSet, UnitType

PREFLIGHT_TIMEOUT = 120.0
STOP_GRACE = 10.0  # beyond a level's longest timeout_stop, for reports to come back


class Controller:
    """Owns one run from plan to result."""

    def __init__(self, options: RunOptions, state: StateDir) -> None:
        self.options = options
        self.state = state
        self.invocation_id = uuid.uuid4().hex
        self.secret = new_secret()
        self.started = time.time()
        self.events = EventLog(state.events)
        self._containment_reports: dict[tuple[str, str | None], Contained] = {}
        self.console = Console(
            verbose=options.verbosity is Verbosity.VERBOSE,
            quiet=options.verbosity is Verbosity.QUIET,
        )
        self.launcher = LauncherKind.LOCAL  # until the allocation is resolved
        self.control_port: int | None = None
        self.nodes: dict[Host, RunNode] = {}  # the local node, and each connected agent
        self.ending = trio.Event()
        self._run: RunState | None = None
        self._early_outcome: Outcome | None = None  # an error before the run had a plan
        self._changed = trio.Event()  # set (and replaced) after every input
        self._preflight_done = trio.Event()
        self._fleet: AgentFleet | None = None
        self._local: NodeRunner | None = None
        self._lanes: LanePublisher | None = None
        self._containment: Containment | None = None  # ddsup start's no-orphan layers

    @property
    def run(self) -> RunState:
        assert self._run is not None, "the run has no plan yet"
        return self._run

    # --- top level ------------------------------------------------------------------
    async def main(self) -> int:
        self._write_run_json()
        self._record(RunStarting(invocation_id=self.invocation_id))
        try:
            units = self._load_units()
            allocation = resolve_allocation(self.options.allocation, os.environ)
            self.launcher = allocation.launcher
            self._lanes = LanePublisher(endpoint_setup(units))
            plan = plan_for(units, allocation)
            self._run = RunState(units, plan)
            self._lanes.snapshot = self._run.ready_lanes
            self.console.lanes(self.run.lane_models())
            write_private(self.state.plan, plan.to_json())
            await self._supervise(units, allocation, self._lanes)
        except DdsupError as err:
            self._fail(err)
            self.console.error(str(err))
        outcome = self._outcome() or Outcome(ResultStatus.STOPPED, 1, None, "ended without a cause")
        self.state.write_json(self.state.result, outcome.to_dict())
        self._record(RunFinished(outcome=outcome))
        self.events.close()
        self.console.result(outcome, self.state.path)
        if self._run is not None:
            self.console.efficiency(self._efficiency_line())
        return outcome.exit_code

    def _efficiency_line(self) -> str:
        """Where the allocation's GPU time went (docs/operating.md), from the run's files."""
        try:
            return efficiency_line(self.state.path)
        except (DdsupError, OSError, ValueError) as err:  # a report, never the run's end
            return f"GPU time: not known ({err})"

    def _load_units(self) -> UnitSet:
        directory = self.options.directory
        if not directory.is_dir():
            raise UsageError(f"{printable(str(directory))} is not a directory of unit files")
        try:
            return load_unit_set(directory.resolve())
        except UnitFileError as err:
            for problem in err.problems:
                print(problem, file=sys.stderr)
            raise UnitFileError(err.problems) from None

    def _fail(self, error: DdsupError) -> None:
        if self._run is not None:
            self.feed(StartupFailed(error))
        elif self._early_outcome is None:
            self._early_outcome = Outcome.of(error)
            self._record(RunEnding(outcome=self._early_outcome))

    def _outcome(self) -> Outcome | None:
        return self._run.outcome if self._run is not None else self._early_outcome

    def _write_run_json(self) -> None:
        port = self.control_port
        info = RunInfo(
            invocation_id=self.invocation_id,
            pid=os.getpid(),
            launcher=self.launcher.value,
            unit_dir=str(self.options.directory.resolve()),
            started_at=self.started,
            control=None if port is None else ControlAddress("127.0.0.1", port),
            containment=self._layers_json(),
        )
        self.state.write_json(self.state.run, info.to_json())

    # --- supervision ----------------------------------------------------------------
    async def _supervise(
        self, units: UnitSet, allocation: Allocation, lanes: LanePublisher
    ) -> None:
        # every no-orphan layer (docs/no-orphans.md), opened once, closed at the very end
        async with open_containment(
            self.invocation_id, state_dir=self.state.path, name="controller", root=True
        ) as containment:
            self._contained(containment)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._watch_signals, units)
                nursery.start_soon(self.console.run)
                await self._open_control(nursery, lanes)
                async with trio.open_nursery() as services:
                    self._local = self._local_runner(units, services)
                    self.nodes[Host(self.run.plan.client, agent=False)] = LocalNode(self._local)
                    try:
                        await self._until_ended(units, allocation)
                    finally:
                        with trio.CancelScope(shield=True):
                            await self._stop_everything()
                        services.cancel_scope.cancel()
                nursery.cancel_scope.cancel()
        if containment.survivors:
            self._record(SweepLeftSurvivors(pids=tuple(containment.survivors)))

    def _layers_json(self) -> dict[str, Any] | None:
        layers = None if self._containment is None else self._containment.layers
        return None if layers is None else layers.to_json()

    def _contained(self, containment: Containment) -> None:
        """Say which no-orphan layers hold here: in run.json (for status) and an event."""
        self._containment = containment
        self._write_run_json()
        layers = containment.layers
        assert layers is not None
        self._record(
            Contained(
                node=None,
                supervisor=layers.supervisor,
                summary=layers.summary(),
                details=layers.to_json(),
            )
        )

    async def _open_control(self, nursery: trio.Nursery, lanes: LanePublisher) -> None:
        """Listen for agents, the endpoint's feed and operators; say where in run.json."""
        server = ControlServer(
            feed=self.feed,
            setup=self._setup,
            snapshot=self._snapshot,
            stopping=lambda: self.run.stopping,
            nodes=self.nodes,
            lanes=lanes,
        )
        host = "127.0.0.1" if self.launcher is LauncherKind.LOCAL else "0.0.0.0"
        serve = partial(serve_channel, server.serve, self.secret, host=host)
        self.control_port = await nursery.start(serve)
        write_private(self.state.secret, self.secret + "\n")
        self._write_run_json()

    async def _until_ended(self, units: UnitSet, allocation: Allocation) -> None:
        """Start everything in order, then wait until something ends the run."""
        async with trio.open_nursery() as starters:
            starters.start_soon(self._start, units, allocation, starters)
            await self.ending.wait()
            starters.cancel_scope.cancel()

    async def _start(self, units: UnitSet, allocation: Allocation, nursery: trio.Nursery) -> None:
        """Agents first (each runs preflight), then whatever the run's state says is due."""
        nodes = self.run.agent_nodes()
        if nodes:
            launcher = launcher_for(allocation, units, self.options.srun_args)
            self._fleet = AgentFleet(launcher, self.state)
            local = len(self.run.plan.on_node(self.run.plan.client))
            env = agent_env(allocation, self.invocation_id, self.control_port, self.secret)
            try:
                ensure_open_files(open_files_needed(len(nodes), local))
                await self._fleet.launch(nodes, env, nursery, self.feed)
            except DdsupError as err:
                self.feed(StartupFailed(err))
                return
            with trio.move_on_after(PREFLIGHT_TIMEOUT):
                await self._preflight_done.wait()
        self.feed(PreflightOver(PREFLIGHT_TIMEOUT))

    async def _watch_signals(self, units: UnitSet) -> None:
        forwarded = {s for u in units.units for s in u.service.forward_signals}
        # SIGUSR1/2 are received even when no unit wants them: they must not kill ddsup
        with stop_signal_receiver(*forwarded, signal.SIGUSR1, signal.SIGUSR2) as signals:
            async for signum in signals:
                if signum in forwarded:
                    self.feed(SignalToForward(signum))
                elif signum in STOP_SIGNALS:
                    self.feed(StopSignalled(signum))

    # --- the run's state in, its decisions out --------------------------------------
    def feed(self, event: Input) -> None:
        """Give the run's state one input and carry out what it decides, in order."""
        if isinstance(event, Observed):
            self._record(event.event)
        for decision in self.run.handle(event):
            self._carry_out(decision)
        if isinstance(event, PreflightReported) and self.run.preflight_complete:
            self._preflight_done.set()
        self._changed.set()
        self._changed = trio.Event()

    def _carry_out(self, decision: Decision) -> None:
        if isinstance(decision, StartOn | StopOn | SignalOn):
            node = self.nodes.get(decision.host)
            if node is None:
                return  # an agent that is not connected: there is nothing to ask
            if isinstance(decision, StartOn):
                node.start(decision.instances)
            elif isinstance(decision, StopOn):
                node.stop(decision.instances, decision.reason)
            else:
                node.signal(decision.instances, decision.signum)
        elif isinstance(decision, KillEverything):
            for node in list(self.nodes.values()):
                node.kill()
            if self._fleet is not None:
                self._fleet.kill_unconnected(self._connected())
        elif isinstance(decision, EndRun):
            self.ending.set()
        elif isinstance(decision, PublishLanes) and self._lanes is not None:
            self._lanes.publish(decision.changed)
        elif isinstance(decision, Record):
            self._record(decision.event)
        elif isinstance(decision, PlanPorted):
            write_private(self.state.plan, decision.plan.to_json())
            if self._local is not None:
                self._local.plan = decision.plan

    def _record(self, event: RecordedEvent) -> None:
        self.events.write(event)
        if isinstance(event, Contained):  # the latest of each supervisor, for status
            self._containment_reports[(event.supervisor, event.node)] = event
        self.console.event(event)

    def _connected(self) -> set[str]:
        return {host.node for host in self.nodes if host.agent}

    # --- the stop sequence ----------------------------------------------------------
    async def _stop_everything(self) -> None:
        """Level by level, deepest first, each bounded; then the agents shut down."""
        self.feed(StopBegins())
        for level in self.run.stop_levels():
            decisions, awaited = self.run.stop_level(level)
            for decision in decisions:
                self._carry_out(decision)
            with trio.move_on_after(self.run.stop_limit(level) + STOP_GRACE):
                await self._until_final(awaited)
        connected = self._connected()
        for node in list(self.nodes.values()):
            node.shutdown()
        if self._fleet is not None:
            await self._fleet.shutdown(connected, killing=self.run.killing)

    async def _until_final(self, instances: set[str]) -> None:
        """Until every one of ``instances`` is final; checked again after every input."""
        while True:
            changed = self._changed
            if all(self.run.is_final(i) for i in instances):
                return
            await changed.wait()

    # --- what the run lends its processes -------------------------------------------
    def _local_runner(self, units: UnitSet, nursery: trio.Nursery) -> NodeRunner:
        """The services of the controller's own node; the endpoint gets its feed's address."""
        plan = self.run.plan
        endpoints = [i.instance for i in plan.instances if i.type is UnitType.ENDPOINT]
        feed = {ADDRESS_ENV: f"127.0.0.1:{self.control_port}", SECRET_ENV: self.secret}
        return NodeRunner(
            units=units,
            plan=plan,
            run=self._run_context(with_key=True),
            state=self.state,
            nursery=nursery,
            emit=lambda event: self.feed(Observed(event)),
            extra_args={name: ("--lanes-from-controller",) for name in endpoints},
            extra_env={name: feed for name in endpoints},
        )

    def _run_context(self, *, with_key: bool) -> RunContext:
        """Facts of the run for specifiers and environments; the key for the worker only."""
        units = self.run.units
        api_key = None
        section = units.endpoint.endpoint if units.endpoint else None
        if with_key and section is not None and section.api_key_env:
            api_key = os.environ.get(section.api_key_env)
        return RunContext(
            invocation_id=self.invocation_id,
            state_dir=str(self.state.path),
            unit_dir=str(self.options.directory.resolve()),
            job_id=os.environ.get("SLURM_JOB_ID", self.invocation_id[:12]),
            endpoint_url=self.run.plan.endpoint_url,
            api_key=api_key,
        )

    def _setup(self, node: str) -> Setup:
        return agent_setup(self._run_context(with_key=False), self.run.node_plan(node))

    def _snapshot(self) -> RunSnapshot:
        return RunSnapshot(
            invocation_id=self.invocation_id,
            launcher=self.launcher.value,
            started_at=self.started,
            uptime=time.time() - self.started,
            state_dir=str(self.state.path),
            stopping=self.run.stopping,
            instances=self.run.status_rows(),
            containment=tuple(self._containment_reports.values()),
        )
