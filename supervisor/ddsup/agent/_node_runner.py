"""The services of one node: build each instance's spec, start, stop, signal them.

Both a node agent (lanes, each-node services) and the controller (endpoint, worker,
client services) run their instances through a :class:`NodeRunner`, so supervision
behaves the same wherever a unit runs.

A lane's planned ``start_delay`` (its stagger) counts from this node's first lane start:
when the run admits lanes one by one (``[lane] max_loading``), a lane told to start after
its delay has passed starts at once, one told earlier waits the rest of it. Ranks of a
multi-node replica are held and resumed as the run says (``take_down``, ``resume``,
``fail_held``); rank 0 resumes on its planned rendezvous port while that is free, else on
one the kernel picks.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from functools import partial
from pathlib import Path

import trio

from ddsup.agent._ports import pick_ports, port_free
from ddsup.plan import Plan, PlannedInstance
from ddsup.record import NodeEvent, StateDir
from ddsup.service import (
    RunContext,
    Service,
    ServiceSpec,
    specifier_context,
    unit_environment,
    withheld_variables,
)
from ddsup.units import UnitSet, resolve_argv


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
        emit: Callable[[NodeEvent], None],
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
        self._lanes_began: float | None = None  # trio time of this node's first lane start

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
        node = self.plan.node(planned.node)
        withheld = withheld_variables(self.units, unit)
        env = unit_environment(
            self._base_env, unit, planned, context, self.run, withheld, node=node
        )
        env.update(self._extra_env.get(planned.instance, {}))
        cwd = Path(self.run.unit_dir, unit.service.working_directory)
        log_path = self.state.log_file(planned.instance)
        return ServiceSpec(
            instance=planned.instance,
            node=planned.node,
            unit=unit,
            argv=argv,
            env=env,
            cwd=str(cwd),
            log_path=log_path,
            context=context,
            start_delay=self._stagger_left(planned) if unit.lane is not None else 0.0,
            probe=not follower,
            replica=planned.nnodes > 1,
            master_port=planned.master_port if planned.nnodes > 1 else None,
            log_error=partial(self.state.faults.failed, self.state.log(planned.instance)),
        )

    def _stagger_left(self, planned: PlannedInstance) -> float:
        """The rest of a lane's planned delay, counted from this node's first lane start."""
        now = trio.current_time()
        if self._lanes_began is None:
            self._lanes_began = now
        return max(0.0, self._lanes_began + planned.start_delay - now)

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

    def take_down(self, instances: Iterable[str], reason: str) -> None:
        """End these replica ranks' processes and hold them until resumed or failed."""
        for name in instances:
            service = self.services.get(name)
            if service is not None:
                service.take_down(reason)

    def resume(self, instance: str, delay: float, attempt: int, master_port: int | None) -> None:
        """Start a held replica rank again; rank 0 picks the rendezvous port when not given."""
        service = self.services.get(instance)
        if service is None:
            return
        planned = self.planned(instance)

        def respec() -> ServiceSpec:  # called right before the start, after the delay
            port = master_port if master_port is not None else _rendezvous_port(planned)
            return self.build_spec(replace(planned, master_port=port))

        service.resume(delay, attempt, respec)

    def fail_held(self, instances: Iterable[str], reason: str, readiness_timeout: bool) -> None:
        for name in instances:
            service = self.services.get(name)
            if service is not None:
                service.fail_held(reason, readiness_timeout)

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


def _rendezvous_port(planned: PlannedInstance) -> int | None:
    """Rank 0's master port for a fresh rendezvous: the planned one while it is free."""
    port = planned.master_port
    if port is None or port_free(port):
        return port
    return pick_ports(1)[0]
