"""The state of one run and every decision it makes: pure, no trio, no I/O.

``RunState.handle(input)`` returns the decisions an input leads to (``_run_inputs``):

- **Start readiness.** Once preflight has passed on every agent node, an instance starts
  when every instance of each unit in its ``after`` has been ready once (a oneshot:
  completed); the worker also waits for the endpoint, and the endpoint for its
  **quorum**: ``min_ready`` ready lanes of every model at the same moment. Nothing
  starts once the run is ending.
- **Finality.** An instance is final once it has exited or failed, or once the agent
  that ran it is gone; the stop sequence waits for finality, level by level.
- **Failures.** The worker's end ends the run with its status. A unit that fails for
  good ends it with :class:`~ddsup._errors.UnitFailed` (70) or
  :class:`~ddsup._errors.ReadinessTimeout` (75) when its ``on_failure`` is ``stop-all``;
  with ``continue``, the instances of the units that ``require`` it are stopped.
  A lost agent, or its process ending, ends the run (70); a stop signal, an agent's stop
  signal or ``ddsup stop`` ends it as stopped (128+N). **The first cause wins.**
- **Replica peers**: ``_replicas`` (a multi-node replica lives and dies as one).
- **Ready lanes** for the endpoint: rank 0 of every ready lane replica, kept as events
  arrive; each change is published as it happens (the lanes that came and went), and
  the whole set is there for a new subscriber. An event costs the same with 8 lanes or
  1,024: nothing here walks every instance per event.
"""

from __future__ import annotations

import signal
from collections.abc import Iterable, Sequence
from dataclasses import replace

from ddsup._errors import PreflightError
from ddsup.channel._messages import LanesChanged, LanesUpdate, PreflightReport, ReadyLane
from ddsup.plan._model import Plan, PlannedInstance
from ddsup.record._events import (
    KillingEverything,
    ProcessStarted,
    RunEnding,
    RunStopping,
    SignalForwarded,
    UnitTransition,
)
from ddsup.record._instance import InstanceRecord
from ddsup.record._outcome import Cause, Outcome, Stopped, UnitFailure, WorkerEnded
from ddsup.record._states import InstanceState
from ddsup.record._status import InstanceStatus
from ddsup.run._ordering import lanes_by_model, runs_on_agent, start_after, stop_levels
from ddsup.run._replicas import take_down_peers
from ddsup.run._run_inputs import (
    AgentGone,
    AgentProcessExited,
    AgentSignalled,
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
    StopRequested,
    StopSignalled,
)
from ddsup.units._model import EndpointSection, OnFailure, UnitSet, UnitType

REQUIRED_FAILED = "a required unit failed"


class RunState:
    """Everything the controller knows about its run, and the rules that use it."""

    def __init__(self, units: UnitSet, plan: Plan) -> None:
        self.units = units
        self.plan = plan
        self.records: dict[str, InstanceRecord] = {}
        self.outcome: Outcome | None = None
        self.stopping = False
        self.killing = False
        self._ready_once: set[str] = set()
        self._final: set[str] = set()
        self._started: set[str] = set()
        self._may_start = False
        self._stop_signals = 0
        self._preflight: dict[str, PreflightReport] = {}
        self._lane_models = lanes_by_model(units, plan)
        self._model_of = {i: m for m, names in self._lane_models.items() for i in names}
        self._ready_lanes: dict[str, ReadyLane] = {}  # serving lanes ready now
        self._ready_count = dict.fromkeys(self._lane_models, 0)  # … of each model
        self._addresses = {node.name: node.address for node in plan.nodes}
        self._by_name = {p.instance: p for p in plan.instances}
        # what each instance waits for, worked out once: an event only re-checks these
        self._after = {p.instance: tuple(start_after(units, plan, p)) for p in plan.instances}
        self._not_started = list(plan.instances)
        agents = {p.node for p in plan.instances if runs_on_agent(units, p)}
        self._agent_nodes = tuple(n.name for n in plan.nodes if n.name in agents)
        self._node_plans: dict[str, Plan] = {}
        self._ranks: dict[str, tuple[PlannedInstance, ...]] = {}  # multi-node replicas
        for planned in plan.instances:
            if planned.nnodes > 1:
                ranks = self._ranks.get(planned.replica_name, ())
                self._ranks[planned.replica_name] = (*ranks, planned)

    # --- queries --------------------------------------------------------------------
    def host_of(self, planned: PlannedInstance) -> Host:
        return Host(planned.node, runs_on_agent(self.units, planned))

    def agent_nodes(self) -> tuple[str, ...]:
        """Nodes that need an agent, in plan order."""
        return self._agent_nodes

    def node_plan(self, node: str) -> Plan:
        """What the agent of ``node`` needs of the plan: its node and its instances (which
        carry all their specifiers need, rank 0's address included). Sent to each agent
        instead of the whole plan, which at 1,000 nodes × 8 lanes is 2 MB per agent."""
        if not self._node_plans:
            nodes = {n.name: n for n in self.plan.nodes}
            slices: dict[str, list[PlannedInstance]] = {}
            for planned in self.plan.instances:
                slices.setdefault(planned.node, []).append(planned)
            self._node_plans = {
                name: replace(self.plan, nodes=(n,), instances=tuple(slices.get(name, ())))
                for name, n in nodes.items()
            }
        return self._node_plans[node]

    @property
    def preflight_complete(self) -> bool:
        return self._preflight.keys() >= set(self._agent_nodes)

    def is_final(self, instance: str) -> bool:
        return instance in self._final

    def lane_models(self) -> dict[str, str]:
        """Serving lane instance (rank 0 of a replica) → model."""
        return dict(self._model_of)

    def ready_lanes(self) -> LanesUpdate:
        """Every ready serving lane now, in plan order (what a new feed subscriber gets)."""
        lanes = self._ready_lanes
        ready = tuple(lanes[p.instance] for p in self.plan.instances if p.instance in lanes)
        return LanesUpdate(ready, tuple(sorted(self._lane_models)))

    def status_rows(self) -> tuple[InstanceStatus, ...]:
        """One ``status`` row per planned instance, in plan order."""
        rows = []
        for p in self.plan.instances:
            model = self._model_of.get(p.instance)
            row = InstanceStatus(p.instance, p.unit, p.type, p.node, p.gpus, p.port, model)
            rows.append(row.with_record(self.records.get(p.instance, InstanceRecord())))
        return tuple(rows)

    def stop_levels(self) -> list[list[PlannedInstance]]:
        """Instances by start depth, deepest first: the order in which to stop them."""
        return stop_levels(self.units, self.plan)

    def stop_level(self, level: Sequence[PlannedInstance]) -> tuple[list[Decision], set[str]]:
        """Stop one level: what to send where, and the instances to wait for.

        Agents get a stop for every instance of theirs in the level (an agent that never
        started one ignores it); the controller's own node for those it started. The wait
        covers what can still report: started here, or heard of from an agent.
        """
        decisions: list[Decision] = []
        for host, names in _by_host(self, level):
            mine = [n for n in names if host.agent or n in self._started]
            if mine:
                decisions.append(StopOn(host, tuple(mine)))
        awaited = {
            p.instance
            for p in level
            if (p.instance in self._started and not self.host_of(p).agent)
            or (p.instance in self.records and self.host_of(p).agent)
        }
        return decisions, awaited - self._final

    def stop_limit(self, level: Sequence[PlannedInstance]) -> float:
        """The longest ``timeout_stop`` in a level."""
        return max((self.units.by_name(p.unit).service.timeout_stop for p in level), default=0.0)

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
            return [Record(RunStopping())]
        if isinstance(event, SignalToForward):
            return self._forward(event.signum)
        if isinstance(event, StopSignalled):
            return self._stop_signal(event.signum)
        if isinstance(event, AgentGone):  # what it ran can report nothing more
            node = self.plan.on_node(event.node)
            self._final.update(p.instance for p in node if self.host_of(p).agent)
        return self._end(self._cause(event))

    def _cause(
        self,
        event: AgentGone | AgentSignalled | AgentProcessExited | StopRequested | StartupFailed,
    ) -> Cause | None:
        """The cause an input would end the run with (None: it does not end it)."""
        if isinstance(event, StopRequested):
            return Stopped(signal.SIGTERM, "ddsup stop")
        if isinstance(event, StartupFailed):
            return event.error
        if isinstance(event, AgentSignalled):
            reason = f"the agent on {event.node} received {signal.Signals(event.signum).name}"
            return Stopped(event.signum, reason)
        if isinstance(event, AgentGone):
            return None if self.stopping else UnitFailure(f"agent on {event.node}", event.reason)
        if self.stopping:
            return None
        reason = f"{event.label} exited unexpectedly ({event.exit.describe()})"
        return UnitFailure(event.label, reason, event.exit)

    def _observed(self, observed: Observed) -> list[Decision]:
        event = observed.event
        if isinstance(event, ProcessStarted):
            self.records[event.instance] = self._record(event.instance).apply(event)
        if not isinstance(event, UnitTransition):
            return []
        self.records[event.instance] = self._record(event.instance).apply(event)
        decisions: list[Decision] = []
        ranks = self._ranks.get(event.instance.split(":", 1)[0])
        if ranks is not None and not self.stopping:  # a rank of a multi-node replica
            peers = replace(self.plan, instances=ranks)  # its replica's ranks, not all
            records = self.records
            decisions += take_down_peers(self.units, peers, records, event.instance, event.to_state)
        if event.to_state is InstanceState.READY or event.completed:
            self._ready_once.add(event.instance)
        if event.to_state.final:
            self._final.add(event.instance)
            decisions += self._on_final(event)
        decisions += self._publish(event.instance, event.to_state)
        decisions += self._due_starts()
        return decisions

    def _record(self, instance: str) -> InstanceRecord:
        return self.records.get(instance, InstanceRecord())

    def _on_final(self, event: UnitTransition) -> list[Decision]:
        """The worker's end ends the run; a unit failed for good ends it or its requirers."""
        planned = self._planned(event.instance)
        if self.stopping or planned is None:
            return []
        unit = self.units.by_name(planned.unit)
        if unit.type is UnitType.WORKER:
            return self._end(WorkerEnded(event.instance, event.exit, event.reason))
        if event.to_state is not InstanceState.FAILED:
            return []
        if unit.service.on_failure is OnFailure.STOP_ALL:
            cause = UnitFailure(event.instance, event.reason, event.exit, event.readiness_timeout)
            return self._end(cause)
        requirers = {u.name for u in self.units.units if unit.base_name in u.requires}
        level = [p for p in self.plan.instances if p.unit in requirers]
        return [StopOn(host, names, REQUIRED_FAILED) for host, names in _by_host(self, level)]

    def _preflight_over(self, waited: float) -> list[Decision]:
        if self.outcome is not None:
            return []
        missing = ", ".join(sorted(set(self._agent_nodes) - set(self._preflight)))
        if missing:
            return self._end(
                PreflightError(f"no agent reported from node(s) {missing} within {waited:g}s")
            )
        reports = sorted(self._preflight.items())
        problems = [f"{node}: {p}" for node, report in reports for p in report.problems]
        if problems:
            return self._end(PreflightError("preflight failed: " + "; ".join(problems)))
        ports = {k: v for _node, report in reports for k, v in report.ports.items()}
        decisions: list[Decision] = []
        if ports:
            self.plan = self.plan.with_ports(ports)
            self._node_plans = {}
            self._by_name = {p.instance: p for p in self.plan.instances}
            self._not_started = list(self.plan.instances)
            decisions.append(PlanPorted(self.plan))
        self._may_start = True
        return decisions + self._due_starts()

    def _due_starts(self) -> list[Decision]:
        """Instances whose turn has come, started once each, grouped by host in plan order."""
        if not self._may_start or self.outcome is not None or self.stopping:
            return []
        due = [p for p in self._not_started if self._due(p)]
        if not due:
            return []
        self._started.update(p.instance for p in due)
        self._not_started = [p for p in self._not_started if p.instance not in self._started]
        return [StartOn(host, names) for host, names in _by_host(self, due)]

    def _due(self, planned: PlannedInstance) -> bool:
        if not all(name in self._ready_once for name in self._after[planned.instance]):
            return False
        return planned.type is not UnitType.ENDPOINT or self._quorum()

    def _quorum(self) -> bool:
        """``min_ready`` lanes of every model ready now (the endpoint's condition to start)."""
        endpoint = self.units.endpoint
        section = (endpoint.endpoint if endpoint else None) or EndpointSection()
        for model, instances in self._lane_models.items():
            if self._ready_count[model] < section.min_ready.required(len(instances)):
                return False
        return True

    def _publish(self, instance: str, state: InstanceState) -> list[Decision]:
        """A serving lane that joined or left the ready set: that change, for the feed."""
        model = self._model_of.get(instance)
        ready = state is InstanceState.READY
        if model is None or ready == (instance in self._ready_lanes):
            return []
        if not ready:
            del self._ready_lanes[instance]
            self._ready_count[model] -= 1
            return [PublishLanes(LanesChanged(removed=(instance,)))]
        planned = self._by_name[instance]
        url = f"http://{self._addresses[planned.node]}:{planned.port}"
        lane = self._ready_lanes[instance] = ReadyLane(instance, model, url)
        self._ready_count[model] += 1
        return [PublishLanes(LanesChanged(added=(lane,)))]

    def _forward(self, signum: int) -> list[Decision]:
        targets = [
            p
            for p in self.plan.instances
            if signum in self.units.by_name(p.unit).service.forward_signals
        ]
        decisions: list[Decision] = [Record(SignalForwarded(signum=signum))]
        return decisions + [SignalOn(h, names, signum) for h, names in _by_host(self, targets)]

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

    def _planned(self, instance: str) -> PlannedInstance | None:
        return self._by_name.get(instance)


def _by_host(
    state: RunState, instances: Iterable[PlannedInstance]
) -> list[tuple[Host, tuple[str, ...]]]:
    """``instances`` grouped by where they run, hosts and names in plan order."""
    groups: dict[Host, list[str]] = {}
    for planned in instances:
        groups.setdefault(state.host_of(planned), []).append(planned.instance)
    return [(host, tuple(names)) for host, names in groups.items()]
