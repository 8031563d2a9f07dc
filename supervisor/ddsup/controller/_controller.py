"""``ddsup start``: the controller of one run, a thin trio shell around :class:`RunState`.

Order: plan → state dir → agents (preflight on every node) → lanes (staggered per node) →
endpoint once ``min_ready`` lanes of each model are ready → worker. The agents were
launched before trio and this module were imported (``_head_start``): the controller
takes over their processes, the containment, the signal receiver and the bound control
socket (``_takeover``), so the agents' start-up overlaps its own. When the nodes' GPUs
are theirs to say (``Allocation.gpus_from_agents``: Slurm, or this machine's GPUs shared
out among simulated nodes), the agents come first, on every node, and the plan is made
from what each one reports (``_agents.NodeInventory``); until then the run's state has an empty
plan, so a signal or a lost agent ends it as at any other time. Everything that
decides (what starts when, what a failure means, which cause ends the run) is in
``RunState``; the controller feeds it inputs (events of its own services and of the
agents, preflight reports, signals, operators) and carries its decisions out on the
nodes (``_nodes``). Once the run ends, everything stops in reverse dependency order
(instances of one level in parallel), the agents shut down, and a sweep by invocation id
removes whatever escaped. ``result.json`` is written on every path; when the state
directory cannot be written (a full or read-only disk) the run goes on, one warning says
so (``record._faults``) and the result is printed on stderr instead.
"""

from __future__ import annotations

import gc
import itertools
import os
from collections.abc import Callable
from functools import partial

import trio

from ddsup._errors import DdsupError, PreflightError, ResultStatus
from ddsup.agent import NodeRunner, watch_signals
from ddsup.channel import (
    Channel,
    EndpointSetup,
    Inventory,
    RestartAnswer,
    RestartOver,
    RestartProgress,
    RestartRequest,
    RestartStep,
    Setup,
    serve_channel,
)
from ddsup.controller._agents import AgentFleet
from ddsup.controller._connections import ControlServer
from ddsup.controller._console import Console
from ddsup.controller._head_start import HeadStart
from ddsup.controller._lane_publisher import LanePublisher
from ddsup.controller._nodes import NODE_DECISIONS, LocalNode, RunNode, deliver
from ddsup.controller._options import Verbosity
from ddsup.controller._own_job import settle_requeue
from ddsup.controller._prepare import PreparedRun
from ddsup.controller._run_facts import RunFacts, feed_environment, run_context
from ddsup.controller._run_record import RunRecord
from ddsup.controller._takeover import TakenOver, take_over
from ddsup.controller._walltime import JobEnd, early_stops
from ddsup.decide import (
    AwaitDrain,
    Decision,
    Drained,
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
    RestartRefused,
    RestartRequested,
    RunState,
    SignalToForward,
    StartupFailed,
    StopBegins,
    StopSignalled,
)
from ddsup.plan import Allocation, LauncherKind, Plan, plan_for
from ddsup.record import (
    ControlAddress,
    Outcome,
    RunFinished,
    RunSnapshot,
    RunStarting,
    StateDir,
    SweepLeftSurvivors,
)
from ddsup.units import UnitSet, UnitType

PREFLIGHT_TIMEOUT = 120.0
NO_CAUSE = Outcome(ResultStatus.STOPPED, 1, None, "ended without a cause")
STOP_GRACE = 10.0  # beyond a level's longest timeout_stop, for reports to come back


def run_controller(prepared: PreparedRun, state: StateDir, head: HeadStart) -> int:
    """The run, from the head start to its exit status.

    What the start-up made (the modules, the units, the plan: tens of thousands of
    objects at allocation scale) lives as long as the run, so the cyclic collector is
    told to leave it alone (``gc.freeze``): a full collection then walks only what the
    run made since, instead of spending the loop's CPU on objects it can never free, at
    a moment the lanes' events wait for the loop. No collection first: it would cost as
    much on the start-up's critical path, and finds almost nothing to free.
    """
    gc.freeze()
    return trio.run(_run, prepared, state, head, restrict_keyboard_interrupt_to_checkpoints=True)


async def _run(prepared: PreparedRun, state: StateDir, head: HeadStart) -> int:
    taken = await take_over(head, PREFLIGHT_TIMEOUT)
    try:
        return await Controller(prepared, state, taken).main()
    finally:
        await taken.aclose()  # a no-op once the controller has closed what it took over


class Controller:
    """Owns one run from plan to result."""

    def __init__(self, prepared: PreparedRun, state: StateDir, head: TakenOver) -> None:
        self.prepared = prepared
        self.options = prepared.options
        self.state = state
        self.head = head  # what ddsup start set up (agents launched) before importing this
        self.invocation_id = head.invocation_id
        self.secret = head.secret
        self.console = Console(
            verbose=self.options.verbosity is Verbosity.VERBOSE,
            quiet=self.options.verbosity is Verbosity.QUIET,
            state_dir=state.path,
        )
        state.faults.warn = self.console.warning  # between the progress line's redraws
        self.launcher = prepared.allocation.launcher
        self.record = RunRecord(
            state,
            self.console,
            invocation_id=self.invocation_id,
            launcher=self.launcher.value,
            unit_dir=str(self.options.directory.resolve()),
            attempt=head.attempt,
        )
        self.control: ControlAddress | None = None  # where the control channel listens
        self.nodes: dict[Host, RunNode] = {}  # the local node, and each connected agent
        self.ending = trio.Event()
        allocation = prepared.allocation
        empty = Plan(allocation.nodes, allocation.client, ())  # until the agents report
        self.run = RunState(prepared.units, prepared.plan or empty)
        self._planned = trio.Event()  # the run has its plan, or ended without one
        self._has_plan = False
        self._starting = True  # until preflight is over
        self._services: trio.Nursery | None = None
        self._changed = trio.Event()  # set (and replaced) after every input
        self._preflight_done = trio.Event()
        self._fleet: AgentFleet | None = None
        if head.launcher is not None:  # before the channel serves: their hellos are expected
            self._fleet = AgentFleet(head.launcher, state, self.invocation_id)
            self._fleet.adopt(head.nodes, head.agents)
        self._local: NodeRunner | None = None
        # the current RunState's lanes: an agents-first run replaces it once it has a plan
        section = prepared.endpoint
        setup = None if section is None else EndpointSetup(section)
        self._lanes = LanePublisher(setup, lambda: self.run.ready_lanes())
        self._tasks: trio.Nursery | None = None  # for tasks a decision starts (drain waits)
        self._tickets = itertools.count(1)
        slurm = self.launcher is LauncherKind.SLURM
        self.job_end = JobEnd(os.environ.get("SLURM_JOB_ID") if slurm else None)

    # --- top level ------------------------------------------------------------------
    async def main(self) -> int:
        self.record.write_run_json()
        self.record.write(RunStarting(invocation_id=self.invocation_id))
        if self.options.rehearse:
            self.console.rehearsal(self.prepared.rehearsed, self.prepared.allocation)
        if self.prepared.plan is not None:
            self._adopt(self.prepared.plan)
        try:
            await self._supervise(self.prepared.units, self.prepared.allocation, self._lanes)
        except DdsupError as err:
            self.feed(StartupFailed(err))
        outcome = self.run.outcome or NO_CAUSE
        if outcome.status is ResultStatus.REQUEUED:  # everything has stopped: now, or never
            outcome = await settle_requeue(outcome, os.environ.get("SLURM_JOB_ID"))
        self.record.write_result(outcome)
        self.record.write(RunFinished(outcome=outcome))
        self.record.close()
        self.console.result(outcome, self.state.path, planned=self._has_plan)
        return outcome.exit_code

    def _adopt(self, plan: Plan) -> None:
        """The run has its plan: the run's state from now on, plan.json, the console."""
        if plan is not self.run.plan and self.run.outcome is None and not self.run.stopping:
            self.run = RunState(self.prepared.units, plan)
        self.state.save(self.state.plan, plan.to_json())
        self.console.lanes(self.run.layout.model_of)
        self._has_plan = True
        self._planned.set()
        if self._services is not None:
            self._local_node(self._services)

    # --- supervision ----------------------------------------------------------------
    async def _supervise(
        self, units: UnitSet, allocation: Allocation, lanes: LanePublisher
    ) -> None:
        head = self.head
        if head.listener is None:  # the control address did not resolve: nothing started
            assert head.failed is not None
            await head.aclose()
            raise head.failed
        # every no-orphan layer (docs/no-orphans.md) and the signal receiver, opened by the
        # head start (before the agents were launched), closed at the very end
        async with head.resources:
            containment = head.containment
            self.record.contained(containment)
            async with trio.open_nursery() as nursery:
                self._tasks = nursery
                forwarded = {s for u in units.units for s in u.service.forward_signals}
                forward = lambda signum: self.feed(SignalToForward(signum))  # noqa: E731
                stop = lambda signum: self.feed(StopSignalled(signum))  # noqa: E731
                nursery.start_soon(watch_signals, head.signals, forwarded, forward, stop)
                nursery.start_soon(self.console.run)
                nursery.start_soon(self.job_end.watch, early_stops(units), self.feed)
                await self._open_control(nursery, lanes, head.listener)
                async with trio.open_nursery() as services:
                    self._services = services
                    if self._has_plan:
                        self._local_node(services)
                    try:
                        await self._until_ended(units, allocation)
                    finally:
                        with trio.CancelScope(shield=True):
                            await self._stop_everything()
                        services.cancel_scope.cancel()
                nursery.cancel_scope.cancel()
        if containment.survivors:
            self.record.write(SweepLeftSurvivors(pids=tuple(containment.survivors)))

    async def _open_control(
        self, nursery: trio.Nursery, lanes: LanePublisher, listener: trio.SocketListener
    ) -> None:
        """Serve the agents, the endpoint's feed and operators; say where in run.json."""
        server = ControlServer(
            feed=self.feed,
            admit=self._admit,
            setup=self._setup,
            snapshot=self._snapshot,
            stopping=lambda: self.run.stopping,
            nodes=self.nodes,
            lanes=lanes,
            agent_instances=lambda node: self.run.layout.agent_instances(node),
            agent_timeout=self.options.agent_timeout,
            restart=self._serve_restart,
        )
        serve = partial(serve_channel, server.serve, self.secret, listener=listener)
        await nursery.start(serve)
        self.control = self._facts().control
        nursery.start_soon(server.beat)
        self.state.save(self.state.secret, self.secret + "\n")
        self.record.listening(self.control)

    async def _until_ended(self, units: UnitSet, allocation: Allocation) -> None:
        """Start everything in order, then wait until something ends the run."""
        async with trio.open_nursery() as starters:
            if self._fleet is not None:
                self._fleet.watch(starters, self.feed)
            starters.start_soon(self._start, units, allocation)
            await self.ending.wait()
            starters.cancel_scope.cancel()

    async def _start(self, units: UnitSet, allocation: Allocation) -> None:
        """Agents first (each runs preflight), then whatever the run's state says is due.

        The agents were launched by the head start (``_head_start``); without a plan yet,
        on every node that may hold lanes, and the plan is made from the GPUs they report."""
        if self.head.failed is not None:  # the agents could not be launched
            self.feed(StartupFailed(self.head.failed))
            return
        if self._fleet is not None:
            try:
                if not self._has_plan:
                    gpus = await self._fleet.gpus(PREFLIGHT_TIMEOUT)
                    self._adopt(plan_for(units, allocation.with_gpus(gpus)))
            except DdsupError as err:
                self.feed(StartupFailed(err))
                return
            if self.run.layout.agent_nodes():
                with trio.move_on_after(PREFLIGHT_TIMEOUT):
                    await self._preflight_done.wait()
        self._starting = False  # an agent refused from now on does not end the run
        self.feed(PreflightOver(PREFLIGHT_TIMEOUT))

    # --- the run's state in, its decisions out --------------------------------------
    def feed(self, event: Input) -> None:
        """Give the run's state one input and carry out what it decides, in order."""
        if isinstance(event, Observed):
            self.record.write(event.event)
        for decision in self.run.handle(event):
            self._carry_out(decision)
        if isinstance(event, PreflightReported) and self.run.preflight_complete:
            self._preflight_done.set()
        self._changed.set()
        self._changed = trio.Event()

    def _carry_out(self, decision: Decision) -> None:
        if isinstance(decision, NODE_DECISIONS):
            node = self.nodes.get(decision.host)
            if node is not None:  # else an agent that is not connected: nothing to ask
                deliver(node, decision)
        elif isinstance(decision, AwaitDrain) and self._tasks is not None:
            drained = self._lanes.expect_drain(decision.instance)
            self._tasks.start_soon(self._await_drain, decision, drained)
        elif isinstance(decision, KillEverything):
            for node in list(self.nodes.values()):
                node.kill()
            if self._fleet is not None:
                self._fleet.kill_unconnected(self._connected())
        elif isinstance(decision, EndRun):
            self.ending.set()
            self._planned.set()  # agents waiting for a plan are told to shut down instead
        elif isinstance(decision, PublishLanes) and self._lanes is not None:
            self._lanes.publish(decision.changed)
        elif isinstance(decision, Record):
            self.record.write(decision.event)
        elif isinstance(decision, PlanPorted):
            self.state.save(self.state.plan, decision.plan.to_json())
            if self._local is not None:
                self._local.plan = decision.plan

    async def _serve_restart(self, request: RestartRequest, channel: Channel) -> None:
        ticket = next(self._tickets)
        await serve_restart(request, channel, self.run, self.feed, lambda: self._changed, ticket)

    async def _await_drain(self, decision: AwaitDrain, drained: trio.Event) -> None:
        with trio.move_on_after(decision.limit) as waited:
            await drained.wait()
        self.feed(Drained(decision.instance, timed_out=waited.cancelled_caught))

    def _connected(self) -> set[str]:
        return {host.node for host in self.nodes if host.agent}

    # --- the stop sequence ----------------------------------------------------------
    async def _stop_everything(self) -> None:
        """Level by level, deepest first, each bounded; then the agents shut down."""
        self.feed(StopBegins())
        for level in self.run.layout.stop_levels():
            decisions, awaited = self.run.stop_level(level)
            for decision in decisions:
                self._carry_out(decision)
            with trio.move_on_after(self.run.layout.stop_limit(level) + STOP_GRACE):
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
    def _local_node(self, services: trio.Nursery) -> None:
        self._local = self._local_runner(self.prepared.units, services)
        self.nodes[Host(self.run.plan.client, agent=False)] = LocalNode(self._local)

    def _admit(self, node: str, report: Inventory) -> str | None:
        """An agent's inventory; a refused agent ends a starting run (69) saying why."""
        fleet = self._fleet
        refused = (
            "no agents were launched" if fleet is None else fleet.inventory.admit(node, report)
        )
        if refused is not None and self._starting:  # later, a stray: no reason to stop
            self.feed(StartupFailed(PreflightError(f"preflight failed: {refused}")))
        elif refused is not None:
            self.console.error(f"refused: {refused}")
        return refused

    async def _setup(self, node: str) -> Setup | None:
        """What an admitted agent is told once the run has its plan (its node's part,
        never a secret); None when the run ended before it had one."""
        await self._planned.wait()
        if not self._has_plan:
            return None
        return agent_setup(self._facts(), self.run.units, self.run.layout.node_plan(node))

    def _local_runner(self, units: UnitSet, nursery: trio.Nursery) -> NodeRunner:
        """The services of the controller's own node; the endpoint gets its feed's address."""
        plan = self.run.plan
        endpoints = [i.instance for i in plan.instances if i.type is UnitType.ENDPOINT]
        feed = feed_environment(self._facts())
        return NodeRunner(
            units=units,
            plan=plan,
            run=run_context(self._facts(), units, plan, os.environ, with_key=True),
            state=self.state,
            nursery=nursery,
            emit=lambda event: self.feed(Observed(event)),
            extra_args={name: ("--lanes-from-controller",) for name in endpoints},
            extra_env={name: feed for name in endpoints},
        )

    def _facts(self) -> RunFacts:
        assert self.head.facts is not None, "the control address is not known"
        return self.head.facts

    def _snapshot(self) -> RunSnapshot:
        return self.record.snapshot(self.run.status_rows(), self.run.stopping, self.job_end.at)


# --- what an agent that said hello is told once the run has a plan (Setup) ----------------
# Here, not in ``_run_facts``, because it needs the channel's messages, which ``ddsup start``
# imports only once its agents are launched (``_head_start``).


def agent_setup(facts: RunFacts, units: UnitSet, plan: Plan) -> Setup:
    """What an agent that said hello is told: the run's facts (never a secret) and
    ``plan``, its node's part of the plan (``RunState.node_plan``), so an agent's set-up
    costs the same at 8 nodes or 1,000 (the whole plan is 2 MB at 1,000 × 8)."""
    run = run_context(facts, units, plan, os.environ, with_key=False)
    return Setup(
        plan=plan,
        invocation_id=run.invocation_id,
        state_dir=run.state_dir,
        unit_dir=run.unit_dir,
        job_id=run.job_id,
        endpoint_url=run.endpoint_url,
        agent_timeout=facts.agent_timeout,
        attempt=run.attempt,
        rehearse=facts.rehearse,
    )


# --- an operator's ddsup restart: begin it, report it until it is over --------------------
# The request is checked against the run's state (:meth:`RunState.restart_targets`; a
# refusal is answered with its reason), fed to it as :class:`RestartRequested`, and then
# every change of step of each instance is sent back on the operator's connection, woken
# by the controller's "something changed" event, until the restart is over.


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
