"""Builders of validated units for placement tests, without going through unit files."""

from __future__ import annotations

from ddsup.plan import Node
from ddsup.units._model import (
    EndpointSection,
    LaneSection,
    Placement,
    ServiceSection,
    SourceLocation,
    Unit,
    UnitSet,
    UnitType,
)

_SERVICE = ServiceSection(exec=("true",))


def lane(
    name: str,
    *,
    gpus: int = 1,
    nodes: int = 1,
    replicas: int | None = 1,
    port: int | None = 8000,
    stagger: float = 5.0,
    lead_standoff: float = 0.0,
) -> Unit:
    """A lane unit; ``name`` ending in ``@`` makes it a template, as ``NAME@.toml`` does."""
    section = LaneSection(
        model=name.rstrip("@"),
        gpus=gpus,
        nodes=nodes,
        replicas=replicas,
        port=port,
        stagger=stagger,
        lead_standoff=lead_standoff,
    )
    return _unit(name, UnitType.LANE, lane=section)


def endpoint(name: str = "endpoint", port: int = 9000) -> Unit:
    return _unit(name, UnitType.ENDPOINT, endpoint=EndpointSection(port=port))


def worker(name: str = "worker") -> Unit:
    return _unit(name, UnitType.WORKER)


def service(name: str, *, on: Placement = Placement.CLIENT, oneshot: bool = False) -> Unit:
    return _unit(name, UnitType.ONESHOT if oneshot else UnitType.SERVICE, on=on)


def _unit(name: str, kind: UnitType, **extra: object) -> Unit:
    return Unit(
        name=name,
        type=kind,
        service=_SERVICE,
        source=SourceLocation(path=f"units/{name}.toml"),
        template=name.endswith("@"),
        **extra,  # type: ignore[arg-type]
    )


def unit_set(*units: Unit) -> UnitSet:
    return UnitSet(directory="units", units=units)


def nodes(count: int, gpus: int = 8, *, prefix: str = "gpu") -> list[Node]:
    """``gpu01`` … with distinct addresses, ``gpus`` GPUs each."""
    return [
        Node(name=f"{prefix}{i + 1:02d}", address=f"10.0.0.{i + 1}", gpus=tuple(range(gpus)))
        for i in range(count)
    ]
