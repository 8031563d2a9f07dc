"""The services of one node: build each instance's spec, start, stop, signal them.

Both a node agent (lanes, each-node services) and the controller (endpoint, worker,
client services) run their instances through a :class:`NodeRunner`, so supervision
behaves the same wherever a unit runs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from pathlib import Path

import trio

from ddsup.plan._model import Plan, PlannedInstance
from ddsup.record._events import RecordedEvent
from ddsup.record._state_dir import StateDir
from ddsup.service._environment import (
    RunContext,
    specifier_context,
    unit_environment,
    withheld_variables,
)
from ddsup.service._service import Service, ServiceSpec
from ddsup.units import resolve_argv
from ddsup.units._model import UnitSet


class NodeRunner:
    """Owns the :class:`Service` tasks of one node inside the caller's nursery."""

    def __init__(
        self,
        *,
        units: UnitSet,
        plan: Plan,
        run: RunContext,
        state: StateDir,
        nursery: trio.Nursery,
        emit: Callable[[RecordedEvent], None],
        base_env: Mapping[str, str] | None = None,
        extra_args: Mapping[str, tuple[str, ...]] | None = None,
        extra_env: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        self.units = units
        self.plan = plan
        self.run = run
        self.state = state
        self._nursery = nursery
        self._emit = emit
        self._base_env = dict(os.environ if base_env is None else base_env)
        self._extra_args = dict(extra_args or {})
        self._extra_env = dict(extra_env or {})
        self.services: dict[str, Service] = {}

    def planned(self, instance: str) -> PlannedInstance:
        for planned in self.plan.instances:
            if planned.instance == instance:
                return planned
        raise KeyError(instance)

    def build_spec(self, planned: PlannedInstance) -> ServiceSpec:
        unit = self.units.by_name(planned.unit)
        context = specifier_context(unit, planned, self.plan, self.run)
        follower = planned.rank is not None and planned.rank > 0
        template = (
            unit.service.exec_follower
            if follower and unit.service.exec_follower
            else unit.service.exec
        )
        argv = resolve_argv(template, context) + self._extra_args.get(planned.instance, ())
        withheld = withheld_variables(self.units, unit)
        env = unit_environment(self._base_env, unit, planned, context, self.run, withheld)
        env.update(self._extra_env.get(planned.instance, {}))
        cwd = Path(self.run.unit_dir, unit.service.working_directory)
        log_path = self.state.log(planned.instance)
        return ServiceSpec(
            instance=planned.instance,
            node=planned.node,
            unit=unit,
            argv=argv,
            env=env,
            cwd=str(cwd),
            log_path=log_path,
            context=context,
            start_delay=planned.start_delay if unit.lane is not None else 0.0,
            probe=not follower,
            log_error=partial(self.state.faults.failed, log_path),
        )

    def start(self, instance: str) -> Service:
        """Start one instance (once: starting a running instance returns it)."""
        existing = self.services.get(instance)
        if existing is not None and not existing.finished.is_set():
            return existing
        service = Service(self.build_spec(self.planned(instance)), self._emit)
        self.services[instance] = service
        self._nursery.start_soon(service.run, name=f"service {instance}")
        return service

    async def stop(
        self, instances: Iterable[str] | None = None, reason: str = "stop requested"
    ) -> None:
        """Stop the given instances (default: all) in parallel and wait until they are down."""
        wanted = None if instances is None else set(instances)
        targets = [s for name, s in self.services.items() if wanted is None or name in wanted]
        for service in targets:
            service.request_stop(reason)
        for service in targets:
            await service.finished.wait()

    def request_stop(self, instances: Iterable[str], reason: str) -> None:
        """Ask the given instances to stop; their services report how it went."""
        for name in instances:
            service = self.services.get(name)
            if service is not None:
                service.request_stop(reason)

    def restart(self, instances: Iterable[str], reason: str) -> None:
        """Stop each instance and start it again at once; one that is over starts anew."""
        for name in instances:
            service = self.services.get(name)
            if service is None or service.finished.is_set():
                self.start(name)
            else:
                service.request_restart(reason)

    def kill_all(self) -> None:
        for service in self.services.values():
            service.kill_now()

    def signal(self, instances: Iterable[str], sig: int) -> None:
        for name in instances:
            service = self.services.get(name)
            if service is not None:
                service.send_signal(sig)
