"""The one allocation resolver: what ``ddsup plan`` prints is what ``ddsup start`` uses.

Both commands turn their flags and the environment into an :class:`Allocation` here,
and make the plan from it with :func:`plan_for`; a test holds the two to the same
``plan.json``. The rules:

- **Launcher.** ``auto`` is ``slurm`` inside a Slurm allocation (``SLURM_JOB_ID`` set),
  else ``local``. ``ddsup plan --nodelist`` plans for a Slurm job on those hosts.
- **Local.** ``--nodes N`` simulated nodes (``node0`` …), all at 127.0.0.1, so their ports
  are planned unique across nodes. GPUs: ``--gpus-per-node G`` simulates G per node
  (indices 0..G-1). Else the GPUs this machine gives ddsup (``ddsup.plan._gpus``) are
  shared out among the simulated nodes in order (8 GPUs, 2 nodes: 4 each; 3 GPUs: 2 and
  1), each node's agent is handed its share as ``CUDA_VISIBLE_DEVICES`` and reports it
  back. Nothing found: 0 GPUs, and lanes fail placement with a hint to pass
  ``--gpus-per-node``.
- **Slurm.** Hosts from ``SLURM_JOB_NODELIST`` (``scontrol show hostnames``; addresses
  from ``scontrol show node``, since node names need not resolve) or from ``--nodelist``
  (python-hostlist; the names are the addresses). ``--nodes N`` keeps the first N hosts.
  GPUs: ``--gpus-per-node G`` simulates G per node. Else each node's agent reports the
  GPUs Slurm gave it there before anything is placed (``gpus_from_agents``): nodes
  with different GPUs are planned as they are. ``ddsup plan`` cannot ask them: it
  assumes every node has what this one has, and says so (``assumed``). The client node
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
from dataclasses import dataclass, replace

from ddsup._errors import PlacementError, UsageError
from ddsup.plan._allocation import (
    LOCAL_ADDRESS,
    expand_nodelist,
    local_nodes,
    node_with,
    slurm_hostnames,
    slurm_node_addresses,
)
from ddsup.plan._gpus import GpuList, detect_gpu_list
from ddsup.plan._placement import make_plan
from ddsup.plan._plan import Node, Plan
from ddsup.plan._slurm_client import HetJob, address_towards, het_job, outside_allocation
from ddsup.units import UnitSet

# --- what the command line asks of the allocation: the launcher and its sizes -------------


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


def launcher_kind(request: AllocationRequest, environ: Mapping[str, str]) -> LauncherKind:
    """What ``--launcher`` (``auto`` by the environment) resolves to."""
    if request.nodelist is not None or request.launcher is LauncherChoice.SLURM:
        return LauncherKind.SLURM
    if request.launcher is LauncherChoice.LOCAL:
        return LauncherKind.LOCAL
    return LauncherKind.SLURM if environ.get("SLURM_JOB_ID") else LauncherKind.LOCAL


@dataclass(frozen=True)
class Allocation:
    """The resolved allocation: nodes, where the client runs, and how agents start.

    With ``gpus_from_agents`` the nodes' GPUs are provisional (this machine's share, or,
    under Slurm, what this node has, ``assumed`` for every node) until each node's agent
    reports its own: :meth:`with_gpus` makes the allocation that is planned then.
    """

    launcher: LauncherKind
    nodes: tuple[Node, ...]
    client: str  # the node where ddsup start, the endpoint and the worker run
    client_address: str  # what agents on other nodes connect to
    shared_address: bool  # all nodes share one address: ports unique across nodes
    simulated_gpus: int | None  # --gpus-per-node G: every node has indices 0..G-1
    gpus_known: bool  # False: nobody said and nothing was found (0 GPUs assumed)
    gpus_from_agents: bool = False  # each node's agent reports its GPUs before placement
    assumed: str | None = None  # what ddsup plan assumed about nodes it cannot ask
    het_group: int | None = None  # a heterogeneous job: the lanes' component (srun --het-group)
    client_apart: bool = False  # the client holds no lanes (het job, outside the allocation)

    def lane_nodes(self) -> list[str]:
        """The nodes that may hold lanes: all, but a client that has no GPUs of its own (a
        heterogeneous job's component 0, a host outside the allocation)."""
        apart = self.client if self.client_apart else None
        return [n.name for n in self.nodes if n.name != apart]

    def with_gpus(self, found: Mapping[str, GpuList]) -> Allocation:
        """The allocation with the GPUs each node's agent found (nodes not in ``found``
        keep theirs); they are what is placed on now."""
        nodes = tuple(node_with(n, found[n.name]) if n.name in found else n for n in self.nodes)
        known = self.gpus_known or any(g.devices for g in found.values())
        return replace(self, nodes=nodes, gpus_known=known, gpus_from_agents=False, assumed=None)


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
            f"{err} (no GPUs were detected: no CUDA_VISIBLE_DEVICES, Slurm GPU variables "
            "or nvidia-smi, so each node counts 0: pass --gpus-per-node G)"
        ) from err


def _local(request: AllocationRequest, environ: Mapping[str, str]) -> Allocation:
    count = request.nodes or 1
    nodes = local_nodes(count, request.gpus_per_node or 0)
    found = None if request.gpus_per_node is not None else detect_gpu_list(environ)
    if found is not None:
        nodes = [node_with(n, share) for n, share in zip(nodes, found.split(count), strict=True)]
    return Allocation(
        launcher=LauncherKind.LOCAL,
        nodes=tuple(nodes),
        client=nodes[0].name,
        client_address=LOCAL_ADDRESS,
        shared_address=True,
        simulated_gpus=request.gpus_per_node,
        gpus_known=request.gpus_per_node is not None or found is not None,
        gpus_from_agents=found is not None and bool(found.devices),
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
    here = _slurm_gpus(request, environ)
    nodes = [_provisional(Node(h, addresses[h], ()), here) for h in hosts]
    if outside is not None:  # the client's host, beside the allocation: no lanes there
        nodes.append(Node(outside, address_towards(addresses[hosts[0]], environ), ()))
    return _slurm_allocation(nodes, client, request.gpus_per_node, here, apart=outside is not None)


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
    simulated = request.gpus_per_node
    # What Slurm says of component 1, until each of its agents reports its own GPUs.
    here = GpuList.simulated(simulated) if simulated is not None else None
    if here is None and het.gpus_per_node is not None:
        here = GpuList.simulated(het.gpus_per_node)
    nodes = [Node(name=client, address=addresses[client], gpus=())]
    nodes += [_provisional(Node(h, addresses[h], ()), here) for h in hosts]
    return _slurm_allocation(nodes, client, simulated, here, het_group=het.lane_group, apart=True)


def _slurm_gpus(request: AllocationRequest, environ: Mapping[str, str]) -> GpuList | None:
    simulated = request.gpus_per_node
    return GpuList.simulated(simulated) if simulated is not None else detect_gpu_list(environ)


def _provisional(node: Node, here: GpuList | None) -> Node:
    return node_with(node, here or GpuList((), "nothing found"))


def _slurm_allocation(
    nodes: list[Node],
    client: str,
    simulated: int | None,
    here: GpuList | None,
    het_group: int | None = None,
    *,
    apart: bool = False,
) -> Allocation:
    addresses = {node.name: node.address for node in nodes}
    assumed = None
    if simulated is None:
        what = here.describe() if here is not None else "no GPUs that ddsup can detect"
        assumed = (
            f"every node is assumed to have what {client} has: {what}; ddsup start plans "
            "with the GPUs each node's agent finds there"
        )
    return Allocation(
        launcher=LauncherKind.SLURM,
        nodes=tuple(nodes),
        client=client,
        client_address=addresses[client],
        shared_address=len(set(addresses.values())) < len(addresses),
        simulated_gpus=simulated,
        gpus_known=here is not None,
        gpus_from_agents=simulated is None,
        assumed=assumed,
        het_group=het_group,
        client_apart=apart,
    )
