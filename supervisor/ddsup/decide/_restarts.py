"""``ddsup restart``: which instances may be restarted, and how far each restart has got.

A restart of a lane that is in the endpoint's rotation goes through three steps: it
leaves the rotation and **drains** (the endpoint finishes what is in flight to it, or
its ``timeout_stop`` runs out), it is **restarted** (stopped and started again at once),
and it is **ready** again, back in the rotation. Other instances (services, lanes the
endpoint does not route to yet) skip the drain. A rolling restart begins the next
instance once the one before is ready again, and stops at the first that fails (the
rest are skipped); otherwise all begin at once.

Pure bookkeeping: :class:`~ddsup.decide._run_state.RunState` asks it which instance to begin
and tells it what happened; the decisions (drain, restart, publish) are the run's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ddsup._errors import DdsupError
from ddsup.channel import RestartStep
from ddsup.plan import Plan, PlannedInstance
from ddsup.record import InstanceState
from ddsup.units import UnitSet, UnitType

_UNDER_WAY = frozenset({InstanceState.RESTARTING, InstanceState.STARTING})


class RestartRefused(DdsupError):
    """A ``ddsup restart`` the run cannot do; the message says why (exit 1)."""


@dataclass
class RestartJob:
    """One ``ddsup restart`` request: its instances in order and the step of each."""

    ticket: int
    order: tuple[str, ...]
    rolling: bool
    steps: dict[str, RestartStep] = field(default_factory=dict)
    under_way: set[str] = field(default_factory=set)  # seen stopping/starting since begun

    @property
    def over(self) -> bool:
        return all(step.over for step in self.steps.values())

    @property
    def ok(self) -> bool:
        return all(step is RestartStep.READY for step in self.steps.values())


class Restarts:
    """Every restart request of a run, by ticket."""

    def __init__(self) -> None:
        self._jobs: dict[int, RestartJob] = {}

    def job(self, ticket: int) -> RestartJob | None:
        return self._jobs.get(ticket)

    def step_of(self, instance: str) -> RestartStep | None:
        """The step of ``instance`` in a restart not over yet (None: none restarts it)."""
        for job in self._jobs.values():
            step = job.steps.get(instance)
            if step is not None and not step.over:
                return step
        return None

    def holds_out(self, instance: str) -> bool:
        """Out of the endpoint's rotation for a restart (draining, or not ready again)."""
        return self.step_of(instance) in (RestartStep.DRAINING, RestartStep.RESTARTING)

    def add(self, ticket: int, instances: Iterable[str], rolling: bool) -> list[str]:
        """A new request; the instances to begin now (the first one, or all)."""
        order = tuple(instances)
        job = RestartJob(ticket, order, rolling, dict.fromkeys(order, RestartStep.QUEUED))
        self._jobs[ticket] = job
        return list(order[:1] if rolling else order)

    def set_step(self, instance: str, step: RestartStep) -> None:
        job = self._job_of(instance)
        if job is not None:
            job.steps[instance] = step
            if step is RestartStep.DRAINING:
                job.under_way.discard(instance)

    def observe(self, instance: str, state: InstanceState) -> list[str]:
        """``instance`` went to ``state``; the instances to begin next (a rolling one)."""
        job = self._job_of(instance)
        if job is None or job.steps[instance] is not RestartStep.RESTARTING:
            return []
        if state in _UNDER_WAY or state is InstanceState.INACTIVE:
            job.under_way.add(instance)
            return []
        if state is InstanceState.READY and instance in job.under_way:
            job.steps[instance] = RestartStep.READY
            return self._next(job)
        if state.final:
            job.steps[instance] = RestartStep.FAILED
            for other, step in job.steps.items():
                if job.rolling and step is RestartStep.QUEUED:
                    job.steps[other] = RestartStep.SKIPPED
        return []

    def abandon(self) -> None:
        """The run is stopping: what has not come back will not."""
        for job in self._jobs.values():
            for instance, step in job.steps.items():
                if not step.over:
                    job.steps[instance] = (
                        RestartStep.SKIPPED if step is RestartStep.QUEUED else RestartStep.FAILED
                    )

    def _job_of(self, instance: str) -> RestartJob | None:
        for job in self._jobs.values():
            step = job.steps.get(instance)
            if step is not None and not step.over:
                return job
        return None

    @staticmethod
    def _next(job: RestartJob) -> list[str]:
        if not job.rolling:
            return []
        queued = [i for i in job.order if job.steps[i] is RestartStep.QUEUED]
        return queued[:1]


def restart_targets(
    names: Iterable[str],
    plan: Plan,
    units: UnitSet,
    states: Mapping[str, InstanceState],
    restarts: Restarts,
) -> tuple[str, ...]:
    """The instances ``names`` mean, in plan order; RestartRefused says why not.

    A name is an instance (``lane@3``; a rank ``lane@3:1`` means its replica, whose
    ranks restart as one) or a unit (``lane``, ``lane@``: all its instances). ``states``
    holds the instances that have started (a missing one has not).
    """
    wanted: list[PlannedInstance] = []
    for name in names:
        found = _matching(name, plan)
        if not found:
            known = _replicas(plan)
            shown = ", ".join(known[:12]) + (", …" if len(known) > 12 else "")
            raise RestartRefused(f"no unit instance {name!r} in this run (instances: {shown})")
        wanted += found
    chosen = {p.instance for p in wanted}
    targets = tuple(p for p in plan.instances if p.instance in chosen)
    for planned in targets:
        _check(planned, units, states, restarts)
    return tuple(p.instance for p in targets)


def _matching(name: str, plan: Plan) -> list[PlannedInstance]:
    replica = name.split(":", 1)[0]
    exact = [p for p in plan.instances if p.instance == replica]
    if exact:
        return exact
    base = name.rstrip("@")
    return [
        p
        for p in plan.instances
        if p.unit.rstrip("@") == base and not p.rank and ":" not in p.instance
    ]


def _replicas(plan: Plan) -> list[str]:
    return [p.instance for p in plan.instances if ":" not in p.instance]


def _check(
    planned: PlannedInstance,
    units: UnitSet,
    states: Mapping[str, InstanceState],
    restarts: Restarts,
) -> None:
    name, kind = planned.instance, units.by_name(planned.unit).type
    if kind is UnitType.WORKER:
        raise RestartRefused(f"{name}: the worker's end ends the run (ddsup stop ends it)")
    if kind is UnitType.ENDPOINT:
        raise RestartRefused(
            f"{name}: restarting the endpoint would fail the requests going through it; "
            "restart its lanes, or stop the run"
        )
    if kind is UnitType.ONESHOT:
        raise RestartRefused(f"{name}: a oneshot runs once")
    state = states.get(name, InstanceState.INACTIVE)
    if state in (InstanceState.INACTIVE, InstanceState.WAITING):
        raise RestartRefused(f"{name} has not started yet")
    if state is InstanceState.STOPPING:
        raise RestartRefused(f"{name} is stopping")
    if restarts.step_of(name) is not None:
        raise RestartRefused(f"{name} is being restarted already")
