"""Validated units and plans built in memory, for tests of pure code (no unit files)."""

from __future__ import annotations

import signal
from typing import Any

from ddsup.plan import Node, Plan, make_plan
from ddsup.units._model import (
    EndpointSection,
    LaneSection,
    MinReady,
    OnFailure,
    ServiceSection,
    SourceLocation,
    Unit,
    UnitSet,
    UnitType,
)


def unit(name: str, kind: UnitType, *, service: dict[str, Any] | None = None, **extra: Any) -> Unit:
    """A unit as its file would give it; ``name`` ending in ``@`` makes it a template."""
    return Unit(
        name=name,
        type=kind,
        service=ServiceSection(exec=("true",), **(service or {})),
        source=SourceLocation(path=f"units/{name}.toml"),
        template=name.endswith("@"),
        **extra,
    )


def lane(
    name: str,
    *,
    model: str | None = None,
    gpus: int = 1,
    nodes: int = 1,
    replicas: int | None = 1,
    kill_signal: signal.Signals = signal.SIGTERM,
    **extra: Any,
) -> Unit:
    section = LaneSection(
        model=model or name.rstrip("@"), gpus=gpus, nodes=nodes, replicas=replicas, port=None
    )
    service = {"kill_signal": kill_signal, **extra.pop("service", {})}
    return unit(name, UnitType.LANE, lane=section, service=service, **extra)


def endpoint(*, min_ready: MinReady | None = None, port: int = 9000) -> Unit:
    section = EndpointSection(port=port, min_ready=min_ready or MinReady())
    return unit("endpoint", UnitType.ENDPOINT, endpoint=section)


def worker(**extra: Any) -> Unit:
    return unit("worker", UnitType.WORKER, **extra)


def service(
    name: str, *, oneshot: bool = False, on_failure: OnFailure = OnFailure.STOP_ALL, **extra: Any
) -> Unit:
    kind = UnitType.ONESHOT if oneshot else UnitType.SERVICE
    service = {"on_failure": on_failure, **extra.pop("service", {})}
    return unit(name, kind, service=service, **extra)


def unit_set(*units: Unit) -> UnitSet:
    return UnitSet(directory="units", units=units)


def nodes(count: int, gpus: int = 2) -> list[Node]:
    """``n1`` … with distinct addresses, ``gpus`` GPUs each."""
    return [Node(f"n{i + 1}", f"10.0.0.{i + 1}", tuple(range(gpus))) for i in range(count)]


def plan(units: UnitSet, count: int = 2, gpus: int = 2) -> Plan:
    """The real placement of ``units`` on ``count`` nodes; the client is the first."""
    return make_plan(units, nodes(count, gpus), client="n1")
