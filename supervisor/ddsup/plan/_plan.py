"""The plan: where every unit instance runs, with which GPUs and port.

A plan is pure data, computed once by ``ddsup start`` (or ``ddsup plan``) and written to
``plan.json``; agents receive it and never re-plan. It holds no environment values, so it
can never leak a secret. ``to_json`` is canonical (sorted keys, fixed separators): the same
inputs give byte-identical plans.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import Any, cast

from ddsup.units import UnitType

PLAN_FORMAT = 1


@dataclass(frozen=True)
class Node:
    """One node of the allocation. ``address`` is what other nodes connect to.

    ``gpus`` are positions 0..G-1, what placement counts; ``devices`` the entries the job
    was given on the node (``CUDA_VISIBLE_DEVICES`` entries: ``4``, ``GPU-…``, ``MIG-…``),
    position ``i`` being ``devices[i]``. Simulated GPUs (``--gpus-per-node``) have none:
    position ``i`` is then index ``i``.
    """

    name: str
    address: str
    gpus: tuple[int, ...]
    devices: tuple[str, ...] = ()

    def device(self, position: int) -> str:
        """What a lane's ``CUDA_VISIBLE_DEVICES`` holds for GPU position ``position``."""
        return self.devices[position] if self.devices else str(position)


@dataclass(frozen=True)
class PlannedInstance:
    """One process to run: a unit instance (for multi-node lanes: one rank of a replica)."""

    instance: str  # "llama@3", "endpoint", "prep@n2"; ranks > 0 of a lane: "llama@3:1"
    unit: str  # the unit's name as in its file ("llama@")
    type: UnitType
    node: str  # Node.name
    gpus: tuple[int, ...] = ()
    port: int | None = None  # None for lanes with port = "auto" until the agent picks one
    replica: int | None = None
    rank: int | None = None  # lanes only: 0 serves HTTP, > 0 run exec_follower
    nnodes: int = 1
    master_addr: str | None = None  # multi-node lanes: rank 0's node address
    master_port: int | None = None
    start_delay: float = 0.0  # lanes: seconds after this node's lane start (stagger)
    model: str | None = None  # lanes: the model name clients send (every rank carries it)
    served_names: tuple[str, ...] = ()  # lanes: every name it answers to (model, aliases, LoRA)

    @property
    def replica_name(self) -> str:
        """The replica this rank belongs to ("llama@3" for "llama@3:1")."""
        return self.instance.split(":", 1)[0]


@dataclass(frozen=True)
class Plan:
    """The whole placement. ``client`` is the node where endpoint and worker run."""

    nodes: tuple[Node, ...]
    client: str
    instances: tuple[PlannedInstance, ...]
    endpoint_url: str | None = None
    shared_address: bool = False  # all nodes share one address: ports unique across nodes
    format: int = field(default=PLAN_FORMAT)

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    def on_node(self, name: str) -> tuple[PlannedInstance, ...]:
        return tuple(i for i in self.instances if i.node == name)

    def served_names(self) -> tuple[str, ...]:
        """Every model name some lane answers to (models, aliases, adapters), sorted."""
        return tuple(sorted({n for i in self.instances for n in i.served_names}))

    def with_ports(self, ports: dict[str, int]) -> Plan:
        """The plan with ``port = "auto"`` lanes given the ports their agents picked."""
        if not ports:
            return self
        instances = tuple(
            replace(i, port=ports[i.instance]) if i.instance in ports else i for i in self.instances
        )
        return replace(self, instances=instances)

    def to_dict(self) -> dict[str, Any]:
        return cast(dict[str, Any], _jsonable(self))

    def to_json(self) -> str:
        """``plan.json``: an object of sorted keys, one line per key, and in a list one
        line per entry (an instance, a node) in compact JSON: ``grep lane@3`` finds a
        lane's whole placement. Each line comes from the C encoder: ``indent=`` would
        take Python's, many times slower at allocation scale, and the plan is written
        twice on the start's way to the first lane."""
        lines = []
        for key, value in sorted(self.to_dict().items()):
            name = _ENCODE(key)
            if isinstance(value, list) and value:
                entries = ",\n    ".join(map(_ENCODE, value))
                lines.append(f"  {name}: [\n    {entries}\n  ]")
            else:
                lines.append(f"  {name}: {_ENCODE(value)}")
        return "{\n" + ",\n".join(lines) + "\n}\n"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Plan:
        nodes = tuple(
            Node(
                name=n["name"],
                address=n["address"],
                gpus=tuple(n["gpus"]),
                devices=tuple(str(d) for d in n.get("devices", ())),
            )
            for n in data["nodes"]
        )
        instances = tuple(
            PlannedInstance(
                **{
                    **i,
                    "type": UnitType(i["type"]),
                    "gpus": tuple(i["gpus"]),
                    "served_names": tuple(i.get("served_names") or ()),
                }
            )
            for i in data["instances"]
        )
        return cls(
            nodes=nodes,
            client=data["client"],
            instances=instances,
            endpoint_url=data.get("endpoint_url"),
            shared_address=bool(data.get("shared_address", False)),
            format=int(data.get("format", PLAN_FORMAT)),
        )


_ENCODE = json.JSONEncoder(sort_keys=True).encode  # compact, C: one per process


def _jsonable(value: Any) -> Any:
    """``value`` in JSON's types: a dataclass as an object of its fields, tuples as lists,
    a unit type as its name. Not ``dataclasses.asdict``, which deep-copies every leaf: on
    the controller's start for the whole plan, and again for each agent's node plan; this
    walk costs a fraction of that."""
    if isinstance(value, UnitType):  # before str: a unit type is one
        return value.value
    if isinstance(value, (str, int, float)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if is_dataclass(value) and not isinstance(value, type):
        return {name: _jsonable(getattr(value, name)) for name in _field_names(type(value))}
    return value


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    """A dataclass's field names (``fields()`` works them out again at every call)."""
    return tuple(f.name for f in fields(cls))
