"""The one allocation resolver: what ``ddsup plan`` prints is what ``ddsup start`` uses.

Both commands turn their flags and the environment into an :class:`Allocation` here,
and make the plan from it with :func:`plan_for`; a test holds the two to the same
``plan.json``. The rules:

- **Launcher.** ``auto`` is ``slurm`` inside a Slurm allocation (``SLURM_JOB_ID`` set),
  else ``local``. ``ddsup plan --nodelist`` plans for a Slurm job on those hosts.
- **Local.** ``--nodes N`` simulated nodes (``node0`` …), all at 127.0.0.1, so their ports
  are planned unique across nodes. GPUs per node: ``--gpus-per-node``, else detected
  (:func:`~ddsup.plan._allocation.detect_gpus`), else 0: a CPU machine runs units without
  lanes, and lanes that need GPUs fail placement with a hint to pass ``--gpus-per-node``.
- **Slurm.** Hosts from ``SLURM_JOB_NODELIST`` (``scontrol show hostnames``; addresses
  from ``scontrol show node``, since node names need not resolve) or from ``--nodelist``
  (python-hostlist; the names are the addresses). ``--nodes N`` keeps the first N hosts.
  GPUs per node: ``--gpus-per-node``, else detected, else a usage error. The client node
  (endpoint, worker) is the one ``ddsup start`` runs on (``SLURMD_NODENAME``; the first
  host of a ``--nodelist``). In a heterogeneous job it is on component 0 and the lanes on
  component 1; run outside the allocation (``salloc`` on a login node) it is this host;
  either way the plan holds it as a node without GPUs (``_slurm_client``). Hosts that
  share one address (several ``slurmd`` on one machine) get ports unique across them.
- The endpoint is reached at 127.0.0.1 in both: the worker runs on the client node
  beside it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from ddsup._errors import PlacementError, UsageError
from ddsup.plan._allocation import (
    LOCAL_ADDRESS,
    detect_gpus,
    expand_nodelist,
    local_nodes,
    slurm_hostnames,
    slurm_node_addresses,
)
from ddsup.plan._model import Node, Plan
from ddsup.plan._placement import make_plan
from ddsup.plan._slurm_client import HetJob, address_towards, het_job, outside_allocation
from ddsup.units._model import UnitSet


class LauncherChoice(str, enum.Enum):
    """``--launcher``: what the user asked for."""

    AUTO = "auto"
    LOCAL = "local"
    SLURM = "slurm"


class LauncherKind(str, enum.Enum):
    """How the node agents are started: what ``auto`` resolved to."""

    LOCAL = "local"
    SLURM = "slurm"


@dataclass(frozen=True)
class AllocationRequest:
    """The command line's say in the allocation (``nodelist`` is ``ddsup plan``'s only)."""

    launcher: LauncherChoice = LauncherChoice.AUTO
    nodes: int | None = None
    gpus_per_node: int | None = None
    nodelist: str | None = None

    def __post_init__(self) -> None:
        if self.nodes is not None and self.nodes < 1:
            raise UsageError(f"--nodes must be at least 1 (got {self.nodes})")
        if self.gpus_per_node is not None and self.gpus_per_node < 0:
            raise UsageError(f"--gpus-per-node must be 0 or more (got {self.gpus_per_node})")
        if self.nodelist is not None and self.nodes is not None:
            raise UsageError("--nodelist and --nodes exclude each other: give one of them")
        if self.nodelist is not None and self.launcher is LauncherChoice.LOCAL:
            raise UsageError("--nodelist plans for a Slurm job: it excludes --launcher local")


@dataclass(frozen=True)
class Allocation:
    """The resolved allocation: nodes, where the client runs, and how agents start."""

    launcher: LauncherKind
    nodes: tuple[Node, ...]
    client: str  # the node where ddsup start, the endpoint and the worker run
    client_address: str  # what agents on other nodes connect to
    shared_address: bool  # all nodes share one address: ports unique across nodes
    gpus_per_node: int
    gpus_known: bool  # False: nobody said and nothing was found (0 GPUs assumed)
    het_group: int | None = None  # a heterogeneous job: the lanes' component (srun --het-group)


def resolve_allocation(request: AllocationRequest, environ: Mapping[str, str]) -> Allocation:
    """The allocation ``request`` means in ``environ``; raises UsageError when it cannot."""
    launcher = launcher_kind(request, environ)
    if launcher is LauncherKind.LOCAL:
        return _local(request, environ)
    return _slurm(request, environ)


def plan_for(units: UnitSet, allocation: Allocation) -> Plan:
    """The placement of ``units`` on ``allocation`` (PlacementError when it cannot hold them)."""
    try:
        return make_plan(
            units,
            allocation.nodes,
            client=allocation.client,
            shared_address=allocation.shared_address,
            endpoint_host=LOCAL_ADDRESS,
        )
    except PlacementError as err:
        if allocation.gpus_known:
            raise
        raise PlacementError(
            f"{err} (no GPUs were detected on this machine, so each node counts 0: "
            "pass --gpus-per-node G)"
        ) from err


def launcher_kind(request: AllocationRequest, environ: Mapping[str, str]) -> LauncherKind:
    """What ``--launcher`` (``auto`` by the environment) resolves to."""
    if request.nodelist is not None or request.launcher is LauncherChoice.SLURM:
        return LauncherKind.SLURM
    if request.launcher is LauncherChoice.LOCAL:
        return LauncherKind.LOCAL
    return LauncherKind.SLURM if environ.get("SLURM_JOB_ID") else LauncherKind.LOCAL


def _local(request: AllocationRequest, environ: Mapping[str, str]) -> Allocation:
    gpus = request.gpus_per_node
    detected = gpus if gpus is not None else detect_gpus(environ)
    nodes = tuple(local_nodes(request.nodes or 1, detected or 0))
    return Allocation(
        launcher=LauncherKind.LOCAL,
        nodes=nodes,
        client=nodes[0].name,
        client_address=LOCAL_ADDRESS,
        shared_address=True,
        gpus_per_node=detected or 0,
        gpus_known=detected is not None,
    )


def _slurm(request: AllocationRequest, environ: Mapping[str, str]) -> Allocation:
    outside = None
    if request.nodelist is not None:
        hosts = expand_nodelist(request.nodelist)
        addresses = {host: host for host in hosts}
        client = hosts[0]
    else:
        het = het_job(environ)
        if het is not None:
            return _het(request, environ, het)
        nodelist = environ.get("SLURM_JOB_NODELIST", "").strip()
        if not nodelist:
            raise UsageError("--launcher slurm needs a Slurm allocation (SLURM_JOB_NODELIST unset)")
        hosts = slurm_hostnames(nodelist)[: request.nodes]
        addresses = slurm_node_addresses(hosts)
        outside = outside_allocation(environ, hosts)
        client = outside or environ.get("SLURMD_NODENAME") or hosts[0]
        if client not in addresses and outside is None:
            raise UsageError(f"ddsup start runs on {client}, which is not in the allocation")
    gpus = _slurm_gpus(request, environ)
    nodes = [Node(name=h, address=addresses[h], gpus=tuple(range(gpus))) for h in hosts]
    if outside is not None:  # the client's host, beside the allocation: no lanes there
        nodes.append(Node(outside, address_towards(addresses[hosts[0]], environ), ()))
    return _slurm_allocation(nodes, client, gpus)


def _het(request: AllocationRequest, environ: Mapping[str, str], het: HetJob) -> Allocation:
    """Client on component 0 (this node), lanes on component 1 (``_slurm_client``)."""
    client = environ.get("SLURMD_NODENAME") or het.client_hosts[0]
    if client not in het.client_hosts:
        raise UsageError(
            f"ddsup start runs on {client}, not on the job's component 0 "
            f"({', '.join(het.client_hosts)}): run it in the batch script"
        )
    hosts = het.lane_hosts[: request.nodes]
    addresses = slurm_node_addresses([client, *hosts])
    gpus = request.gpus_per_node if request.gpus_per_node is not None else het.gpus_per_node
    if gpus is None:
        raise UsageError(
            "cannot tell how many GPUs the nodes of component 1 have (no "
            "SLURM_GPUS_PER_NODE_HET_GROUP_1): pass --gpus-per-node G"
        )
    nodes = [Node(name=client, address=addresses[client], gpus=())]
    nodes += [Node(name=h, address=addresses[h], gpus=tuple(range(gpus))) for h in hosts]
    return _slurm_allocation(nodes, client, gpus, het_group=het.lane_group)


def _slurm_allocation(
    nodes: list[Node], client: str, gpus: int, het_group: int | None = None
) -> Allocation:
    addresses = {node.name: node.address for node in nodes}
    return Allocation(
        launcher=LauncherKind.SLURM,
        nodes=tuple(nodes),
        client=client,
        client_address=addresses[client],
        shared_address=len(set(addresses.values())) < len(addresses),
        gpus_per_node=gpus,
        gpus_known=True,
        het_group=het_group,
    )


def _slurm_gpus(request: AllocationRequest, environ: Mapping[str, str]) -> int:
    if request.gpus_per_node is not None:
        return request.gpus_per_node
    detected = detect_gpus(environ)
    if detected is None:
        raise UsageError(
            "cannot tell how many GPUs each node has (no CUDA_VISIBLE_DEVICES, Slurm GPU "
            "variables or nvidia-smi): pass --gpus-per-node G"
        )
    return detected
