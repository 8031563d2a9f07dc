"""The state of one run and every decision it makes: pure, no trio, no I/O.

``RunState.handle(input)`` returns the decisions an input leads to (``_run_inputs``):

- **Start readiness.** Once preflight has passed on every agent node, an instance starts
  when every instance of each unit in its ``after`` has been ready once (a oneshot:
  completed); the worker also waits for the endpoint, and the endpoint for its
  **quorum**: ``min_ready`` ready lanes of every model at the same moment. Nothing
  starts once the run is ending. What holds one is what ``status`` shows (``_waiting``).
- **Finality.** An instance is final once it has exited or failed, or its agent is gone;
  the stop sequence waits for finality, level by level.
- **Failures.** The worker's end ends the run with its status. A unit that fails for
  good ends it (70, or 75 for a readiness timeout) when its ``on_failure`` is
  ``stop-all``; with ``continue``, the units that ``require`` it are stopped. A lost
  agent ends it (70) unless all on its node says ``continue`` (``_node_loss``); a stop
  signal or ``ddsup stop`` ends it as stopped (128+N). **The first cause wins.**
- ``_replicas``: a multi-node replica lives, restarts (counted once) and fails as one;
  ``_loading``: ``[lane] max_loading``, lanes of a unit loading at once.
- **Ready lanes** for the endpoint (``_lane_rotation``): rank 0 of every ready replica,
  kept as events arrive, each change published as it happens; a lane being restarted is
  left out from its drain until it is ready again (``_restarts``). An event costs the
  same with 8 lanes or 1,024: nothing here walks every instance per event.
"""

from __future__ import annotations

import signal
from collections.abc import Iterable, Mapping, Sequence

from ddsup._errors import PreflightError
from ddsup.channel import LanesUpdate, PreflightReport, RestartStep, merge_changes
from ddsup.decide._lane_rotation import LaneRotation
from ddsup.decide._loading import LoadingGate
from ddsup.decide._node_loss import lanes_short, lost_transitions
from ddsup.decide._ordering import agent_instances, survivable
from ddsup.decide._replicas import ReplicaPolicy
from ddsup.decide._restarts import RestartRefused, Restarts, restart_targets
from ddsup.decide._run_inputs import (
    AgentGone,
    AgentProcessExited,
    AgentSignalled,
    AwaitDrain,
    Decision,
    Drained,
    EndNear,
    EndRun,
    Input,
    KillEverything,
    Observed,
    PlanPorted,
    PreflightOver,
    PreflightReported,
    PublishLanes,
    Record,
    RestartOn,
    RestartRequested,
    SignalOn,
    SignalToForward,
    StartOn,
    StartupFailed,
    StopBegins,
    StopOn,
    StopRequested,
    StopSignalled,
)
from ddsup.decide._run_layout import RunLayout, stop_level
from ddsup.decide._waiting import waiting_reasons
from ddsup.plan import Plan, PlannedInstance
from ddsup.record import (
    Cause,
    InstanceRecord,
    InstanceState,
    InstanceStatus,
    KillingEverything,
    LivenessFailed,
    Outcome,
    PreflightWarning,
    ProbeAnswered,
    ProcessStarted,
    RunEnding,
    RunStopping,
    SignalForwarded,
    StatusRows,
    Stopped,
    UnitFailure,
    UnitTransition,
    WorkerEnded,
)
from ddsup.units import OnFailure, UnitSet, UnitType

REQUIRED_FAILED = "a required unit failed"
RESTART_REASON = "restart requested (ddsup restart)"


class RunState:
    """Everything the controller knows about its run, and the rules that use it."""

    def __init__(self, units: UnitSet, plan: Plan) -> None:
        self.units = units
        self.layout = RunLayout(units, plan)
        self.records: dict[str, InstanceRecord] = {}
        self._status_rows: tuple[RunLayout, StatusRows] | None = None
        self.outcome: Outcome | None = None
        self.stopping = False
        self.killing = False
        self._ready_once: set[str] = set()
        self._final: set[str] = set()
        self._started: set[str] = set()
        self._lost: set[str] = set()  # nodes whose agent is gone
        self._may_start = False
        self._stop_signals = 0
        self._preflight: dict[str, PreflightReport] = {}
        self._rotation = LaneRotation(units, plan, self.layout.lane_models)
        self._not_started = list(plan.instances)
        self._replicas = ReplicaPolicy(units, plan)
        self._gate = LoadingGate(units, plan)
        self.restarts = Restarts()

    # --- queries --------------------------------------------------------------------
    @property
    def plan(self) -> Plan:
        return self.layout.plan

    @property
    def preflight_complete(self) -> bool:
        return self._preflight.keys() >= set(self.layout.agent_nodes())

    def is_final(self, instance: str) -> bool:
        return instance in self._final

    def ready_lanes(self) -> LanesUpdate:
        """The endpoint's rotation now, in plan order (what a new feed subscriber gets)."""
        return self._rotation.snapshot()

    def status_rows(self) -> tuple[InstanceStatus, ...]:
        """One ``status`` row per planned instance, in plan order (``StatusRows``, ``_waiting``)."""
        if self._status_rows is None or self._status_rows[0] is not self.layout:
            self._status_rows = (self.layout, StatusRows(self.plan, self.layout.model_of))
        held = waiting_reasons(
            self._not_started if self.outcome is None and not self.stopping else (),
            may_start=self._may_start,
            after=self.layout.after,
            ready_once=self._ready_once,
            quorum=self._rotation.short_of(self.layout.min_ready),
            holds=lambda unit: self._gate.holds(unit, self._started, self.records),
        )
        return self._status_rows[1].rows(self.records, held)

    def restart_targets(self, names: Sequence[str]) -> tuple[str, ...]:
        """The instances a ``ddsup restart`` of ``names`` covers (RestartRefused: why not)."""
        if self.stopping or self.outcome is not None:
            raise RestartRefused("the run is stopping")
        states = {i: self._record(i).state for i in self._started}
        return restart_targets(names, self.plan, self.units, states, self.restarts)

    def stop_level(self, level: Sequence[PlannedInstance]) -> tuple[list[Decision], set[str]]:
        """Stop one level (``_run_layout.stop_level``): what to send where, what to wait for."""
        return stop_level(level, self.layout.host_of, self._started, self.records, self._final)

    # --- inputs ---------------------------------------------------------------------
    def handle(self, event: Input) -> list[Decision]:
        """The decisions ``event`` leads to, in the order to carry them out."""
        if isinstance(event, Observed):
            return self._observed(event)
        if isinstance(event, PreflightReported):
            self._preflight[event.report.node] = event.report
            return []
        if isinstance(event, PreflightOver):
            return self._preflight_over(event.waited)
        if isinstance(event, StopBegins):
            self.stopping = True
            held = [i for i in self.layout.model_of if self.restarts.holds_out(i)]
            self.restarts.abandon()  # what it held out is as ready as it is now
            return [Record(RunStopping()), *self._publish(held)]
        if isinstance(event, RestartRequested | Drained):
            return [] if self.stopping else self._restart(event)
        if isinstance(event, SignalToForward):
            return self._forward(event.signum)
        if isinstance(event, EndNear):
            return self._stop_unit(event.unit, event.reason)
        if isinstance(event, StopSignalled):
            return self._stop_signal(event.signum)
        if isinstance(event, AgentGone):
            cause = UnitFailure(f"agent on {event.node}", event.reason)
            return self._node_lost(event.node, event.reason, cause)
        if isinstance(event, AgentProcessExited):
            reason = f"{event.label} exited unexpectedly ({event.exit.describe()})"
            cause = UnitFailure(event.label, reason, event.exit)
            return [d for node in event.nodes for d in self._node_lost(node, reason, cause)]
        return self._end(self._cause(event))

    def _node_lost(self, node: str, reason: str, cause: Cause) -> list[Decision]:
        """What it ran can report nothing more: it fails, or the run ends (``_node_loss``)."""
        if node in self._lost:
            return []
        self._lost.add(node)
        names = [p.instance for p in agent_instances(self.units, self.plan, node)]
        if self.stopping or self.outcome is not None or not survivable(self.units, self.plan, node):
            self._final.update(names)
            return [] if self.stopping else self._end(cause)
        self._started.update(names)  # nothing more starts there
        self._not_started = [p for p in self._not_started if p.instance not in self._started]
        decisions: list[Decision] = []
        for lost in lost_transitions(
            self.units, self.plan, node, reason, self.records, self._final
        ):
            decisions.append(Record(lost))
            decisions += self._observed(Observed(lost))
        # the lanes that left, said once
        changes = [d.changed for d in decisions if isinstance(d, PublishLanes)]
        published = [PublishLanes(merge_changes(changes))] if changes else []
        return [d for d in decisions if not isinstance(d, PublishLanes)] + published

    def _cause(self, event: AgentSignalled | StopRequested | StartupFailed) -> Cause | None:
        """The cause an input would end the run with (None: it does not end it)."""
        if isinstance(event, StopRequested):
            return Stopped(signal.SIGTERM, "ddsup stop")
        if isinstance(event, StartupFailed):
            return event.error
        reason = f"the agent on {event.node} received {signal.Signals(event.signum).name}"
        return Stopped(event.signum, reason)

    def _observed(self, observed: Observed) -> list[Decision]:
        event = observed.event
        if isinstance(event, ProcessStarted | ProbeAnswered | LivenessFailed):
            self.records[event.instance] = self._record(event.instance).apply(event)
        if not isinstance(event, UnitTransition):
            return []
        self.records[event.instance] = self._record(event.instance).apply(event)
        decisions: list[Decision] = []
        if not self.stopping:
            verdict = self._replicas.observe(event, self.records)
            decisions += verdict.decisions
            if verdict.failure is not None:
                decisions += self._failed(verdict.failure)
        if event.to_state is InstanceState.READY or event.completed:
            self._ready_once.add(event.instance)
        if event.to_state.final:
            self._final.add(event.instance)
            decisions += self._on_final(event)
            if not self.stopping:
                decisions += self._end(
                    lanes_short(self.units, self.layout.lane_models, self._final)
                )
        begun: list[Decision] = []
        changed = [event.instance]
        if not self.stopping:
            for instance in self.restarts.observe(event.instance, event.to_state):
                begun += self._begin_restart(instance)
                changed.append(instance)
        decisions += self._publish(changed) + begun
        decisions += self._due_starts()
        return decisions

    def _record(self, instance: str) -> InstanceRecord:
        return self.records.get(instance, InstanceRecord())

    def _on_final(self, event: UnitTransition) -> list[Decision]:
        """The worker's end ends the run; a unit failed for good ends it or its requirers."""
        planned = self.layout.by_name.get(event.instance)
        if self.stopping or planned is None:
            return []
        unit = self.units.by_name(planned.unit)
        if unit.type is UnitType.WORKER:
            return self._end(WorkerEnded(event.instance, event.exit, event.reason))
        if event.to_state is not InstanceState.FAILED:
            return []
        return self._failed(
            UnitFailure(event.instance, event.reason, event.exit, event.readiness_timeout)
        )

    def _failed(self, failure: UnitFailure) -> list[Decision]:
        """An instance (or a replica) failed for good: the run ends, or its requirers stop."""
        planned = self.layout.by_name.get(failure.instance)
        assert planned is not None
        unit = self.units.by_name(planned.unit)
        if unit.service.on_failure is OnFailure.STOP_ALL:
            return self._end(failure)
        requirers = {u.name for u in self.units.units if unit.base_name in u.requires}
        level = [p for p in self.plan.instances if p.unit in requirers]
        return [StopOn(host, names, REQUIRED_FAILED) for host, names in self.layout.by_host(level)]

    def _preflight_over(self, waited: float) -> list[Decision]:
        if self.outcome is not None:
            return []
        verdict = preflight_verdict(self.layout.agent_nodes(), self._preflight, waited)
        if isinstance(verdict, PreflightError):
            return self._end(verdict)
        ports = verdict
        decisions: list[Decision] = [
            Record(PreflightWarning(node=node, warning=warning))
            for node, report in sorted(self._preflight.items())
            for warning in report.warnings
        ]
        if ports:
            self.layout = self.layout.with_ports(ports)
            self._rotation.use_plan(self.plan)
            self._not_started = list(self.plan.instances)
            self._replicas = ReplicaPolicy(self.units, self.plan)
            decisions.append(PlanPorted(self.plan))
        self._may_start = True
        return decisions + self._due_starts()

    def _due_starts(self) -> list[Decision]:
        """Instances whose turn has come, started once each, grouped by host in plan order."""
        if not self._may_start or self.outcome is not None or self.stopping:
            return []
        due = [p for p in self._not_started if self._due(p)]
        due = self._gate.admit(due, self._started, self.records)
        if not due:
            return []
        self._started.update(p.instance for p in due)
        self._not_started = [p for p in self._not_started if p.instance not in self._started]
        return [StartOn(host, names) for host, names in self.layout.by_host(due)]

    def _due(self, planned: PlannedInstance) -> bool:
        if not all(name in self._ready_once for name in self.layout.after[planned.instance]):
            return False
        return planned.type is not UnitType.ENDPOINT or self._quorum()

    def _quorum(self) -> bool:
        """``min_ready`` lanes of every model ready now (the endpoint's condition to start)."""
        ready = self._rotation.ready_count
        return all(ready(model) >= n for model, n in self.layout.min_ready.items())

    def _publish(self, instances: Iterable[str]) -> list[Decision]:
        """What ``instances`` changing did to the endpoint's rotation, for the feed."""
        held_out = self.restarts.holds_out
        changed = self._rotation.update(instances, self._state_of, held_out)
        return [] if changed is None else [PublishLanes(changed)]

    def _state_of(self, instance: str) -> InstanceState:
        return self._record(instance).state

    def _in_rotation(self, instance: str) -> bool:
        """Ready, and not being drained for a restart: the endpoint may send it requests."""
        ready = self._record(instance).state is InstanceState.READY
        return ready and not self.restarts.holds_out(instance)

    # --- ddsup restart --------------------------------------------------------------
    def _restart(self, event: RestartRequested | Drained) -> list[Decision]:
        """A request begins (its first instance, or all); a drained lane restarts."""
        if isinstance(event, Drained):
            if self.restarts.step_of(event.instance) is not RestartStep.DRAINING:
                return []
            return self._restart_now(event.instance)
        begun: list[Decision] = []
        instances = self.restarts.add(event.ticket, event.instances, event.rolling)
        for instance in instances:
            begun += self._begin_restart(instance)
        return self._publish(instances) + begun

    def _begin_restart(self, instance: str) -> list[Decision]:
        """A lane in the rotation drains first (the caller publishes the set without it)."""
        if self._in_rotation(instance) and instance in self.layout.model_of and self._endpoint_up():
            self.restarts.set_step(instance, RestartStep.DRAINING)
            unit = self.units.by_name(self.layout.by_name[instance].unit)
            return [AwaitDrain(instance, unit.service.timeout_stop)]
        return self._restart_now(instance)

    def _restart_now(self, instance: str) -> list[Decision]:
        self.restarts.set_step(instance, RestartStep.RESTARTING)
        self._final.discard(instance)  # a failed instance starts again
        host = self.layout.host_of(self.layout.by_name[instance])
        return [RestartOn(host, (instance,), RESTART_REASON)]

    def _endpoint_up(self) -> bool:
        """The endpoint runs (it has lanes in its rotation that a drain could concern)."""
        endpoint = self.units.endpoint
        if endpoint is None:
            return False
        return endpoint.name in self._started and endpoint.name not in self._final

    def _forward(self, signum: int) -> list[Decision]:
        targets = self.layout.by_host(self.layout.forwarded_to(signum))
        decisions: list[Decision] = [Record(SignalForwarded(signum=signum))]
        return decisions + [SignalOn(h, names, signum) for h, names in targets]

    def _stop_unit(self, unit: str, reason: str) -> list[Decision]:
        """Stop every instance of ``unit`` (the job's end is near); none of them starts later."""
        if self.outcome is not None or self.stopping:
            return []
        level = [p for p in self.plan.instances if p.unit == unit]
        self._started.update(p.instance for p in level)
        self._not_started = [p for p in self._not_started if p.unit != unit]
        return [StopOn(host, names, reason) for host, names in self.layout.by_host(level)]

    def _stop_signal(self, signum: int) -> list[Decision]:
        """The first stop signal ends the run; any later one kills everything at once."""
        decisions: list[Decision] = []
        if self._stop_signals and not self.killing:
            self.killing = True
            decisions += [Record(KillingEverything()), KillEverything()]
        self._stop_signals += 1
        name = signal.Signals(signum).name
        return decisions + self._end(Stopped(signum, f"received {name}"))

    def _end(self, cause: Cause | None) -> list[Decision]:
        """The first cause is the outcome; later ones change nothing."""
        if cause is None or self.outcome is not None:
            return []
        self.outcome = Outcome.of(cause)
        return [Record(RunEnding(outcome=self.outcome)), EndRun(self.outcome)]


def preflight_verdict(
    nodes: Sequence[str], reports: Mapping[str, PreflightReport], waited: float
) -> PreflightError | dict[str, int]:
    """The run's verdict on every node's report: the error that ends it (a node that did
    not report within ``waited`` seconds, a problem on any node), or the ports picked."""
    missing = ", ".join(sorted(set(nodes) - set(reports)))
    if missing:
        return PreflightError(f"no agent reported from node(s) {missing} within {waited:g}s")
    ordered = sorted(reports.items())
    problems = [f"{node}: {p}" for node, report in ordered for p in report.problems]
    if problems:
        return PreflightError("preflight failed: " + "; ".join(problems))
    return {k: v for _node, report in ordered for k, v in report.ports.items()}
