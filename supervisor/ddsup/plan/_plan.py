"""The plan: where every unit instance runs, with which GPUs and port.

A plan is pure data, computed once by ``ddsup start`` (or ``ddsup plan``) and written to
``plan.json``; agents receive it and never re-plan. It holds no environment values, so it
can never leak a secret. ``to_json`` is canonical (sorted keys, fixed separators): the same
inputs give byte-identical plans.
"""

from __future__ import annotations

import json
import reprlib
from dataclasses import dataclass, field, replace
from typing import TypedDict

from ddsup._json import Json, JsonObject
from ddsup.units import UnitType

PLAN_FORMAT = 1


class NodeJson(TypedDict):
    """A :class:`Node` in ``plan.json``."""

    name: str
    address: str
    gpus: list[int]
    devices: list[str]


class PlannedInstanceJson(TypedDict):
    """A :class:`PlannedInstance` in ``plan.json``: its unit type by name."""

    instance: str
    unit: str
    type: str
    node: str
    gpus: list[int]
    port: int | None
    replica: int | None
    rank: int | None
    nnodes: int
    master_addr: str | None
    master_port: int | None
    start_delay: float
    model: str | None
    served_names: list[str]


class PlanJson(TypedDict):
    """A :class:`Plan` as ``plan.json`` and an agent's setup hold it."""

    nodes: list[NodeJson]
    client: str
    instances: list[PlannedInstanceJson]
    endpoint_url: str | None
    shared_address: bool
    format: int


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

    def to_dict(self) -> PlanJson:
        """The plan in JSON's types. By hand, not ``dataclasses.asdict``, which deep-copies
        every leaf: on the controller's start for the whole plan, and again for each
        agent's node plan; this costs a fraction of that."""
        return {
            "nodes": [
                {
                    "name": n.name,
                    "address": n.address,
                    "gpus": list(n.gpus),
                    "devices": list(n.devices),
                }
                for n in self.nodes
            ],
            "client": self.client,
            "instances": [_instance_json(i) for i in self.instances],
            "endpoint_url": self.endpoint_url,
            "shared_address": self.shared_address,
            "format": self.format,
        }

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
    def from_dict(cls, data: JsonObject) -> Plan:
        """The plan in ``data`` (:meth:`to_dict`'s format); ``ValueError`` or ``KeyError``
        naming what does not fit. An instance's or a node's fields that are missing take
        their defaults, as do the plan's optional ones; an unknown one is an error."""
        nodes = tuple(_node(n) for n in _list(data["nodes"], "nodes"))
        instances = tuple(_instance(i) for i in _list(data["instances"], "instances"))
        endpoint_url = data.get("endpoint_url")
        return cls(
            nodes=nodes,
            client=_str(data["client"], "client"),
            instances=instances,
            endpoint_url=None if endpoint_url is None else _str(endpoint_url, "endpoint_url"),
            shared_address=_bool(data.get("shared_address", False), "shared_address"),
            format=_int(data.get("format", PLAN_FORMAT), "format"),
        )


_ENCODE = json.JSONEncoder(sort_keys=True).encode  # compact, C: one per process


def _instance_json(i: PlannedInstance) -> PlannedInstanceJson:
    return {
        "instance": i.instance,
        "unit": i.unit,
        "type": i.type.value,
        "node": i.node,
        "gpus": list(i.gpus),
        "port": i.port,
        "replica": i.replica,
        "rank": i.rank,
        "nnodes": i.nnodes,
        "master_addr": i.master_addr,
        "master_port": i.master_port,
        "start_delay": i.start_delay,
        "model": i.model,
        "served_names": list(i.served_names),
    }


def _node(value: Json) -> Node:
    data = _object(value, "node", _NODE_FIELDS)
    return Node(
        name=_str(data["name"], "name"),
        address=_str(data["address"], "address"),
        gpus=_ints(data["gpus"], "gpus"),
        devices=tuple(_str(d, "devices") for d in _list(data.get("devices", []), "devices")),
    )


def _instance(value: Json) -> PlannedInstance:
    data = _object(value, "instance", _INSTANCE_FIELDS)
    get = data.get
    return PlannedInstance(
        instance=_str(data["instance"], "instance"),
        unit=_str(data["unit"], "unit"),
        type=UnitType(data["type"]),
        node=_str(data["node"], "node"),
        gpus=_ints(get("gpus", []), "gpus"),
        port=_int_or_none(get("port"), "port"),
        replica=_int_or_none(get("replica"), "replica"),
        rank=_int_or_none(get("rank"), "rank"),
        nnodes=_int(get("nnodes", 1), "nnodes"),
        master_addr=_str_or_none(get("master_addr"), "master_addr"),
        master_port=_int_or_none(get("master_port"), "master_port"),
        start_delay=_float(get("start_delay", 0.0), "start_delay"),
        model=_str_or_none(get("model"), "model"),
        served_names=tuple(
            _str(n, "served_names") for n in _list(get("served_names") or [], "served_names")
        ),
    )


_NODE_FIELDS = frozenset(NodeJson.__annotations__)
_INSTANCE_FIELDS = frozenset(PlannedInstanceJson.__annotations__)


def _object(value: Json, what: str, known: frozenset[str]) -> JsonObject:
    if not isinstance(value, dict):
        raise ValueError(f"a plan's {what} must be an object, not {reprlib.repr(value)}")
    unknown = set(value) - known
    if unknown:
        raise ValueError(f"a plan's {what} has unknown fields {sorted(unknown)!r}")
    return value


def _list(value: Json, key: str) -> list[Json]:
    if not isinstance(value, list):
        raise ValueError(f"plan key {key!r} must be a list, not {reprlib.repr(value)}")
    return value


def _str(value: Json, key: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"plan key {key!r} must be a string, not {reprlib.repr(value)}")
    return value


def _str_or_none(value: Json, key: str) -> str | None:
    return None if value is None else _str(value, key)


def _int(value: Json, key: str) -> int:
    if type(value) is not int:
        raise ValueError(f"plan key {key!r} must be an integer, not {reprlib.repr(value)}")
    return value


def _int_or_none(value: Json, key: str) -> int | None:
    return None if value is None else _int(value, key)


def _ints(value: Json, key: str) -> tuple[int, ...]:
    return tuple(_int(item, key) for item in _list(value, key))


def _float(value: Json, key: str) -> float:
    if type(value) is int or type(value) is float:
        return float(value)
    raise ValueError(f"plan key {key!r} must be a number, not {reprlib.repr(value)}")


def _bool(value: Json, key: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"plan key {key!r} must be true or false, not {reprlib.repr(value)}")
    return value
