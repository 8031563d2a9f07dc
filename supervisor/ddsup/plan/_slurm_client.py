"""Where the client runs in a Slurm job: beside the lanes, on a CPU component, or outside.

The client (``ddsup start``, the endpoint, the worker) runs where ``ddsup start`` runs.
Usually that is the batch host, the first node of the allocation, which also gets lanes.
Two other layouts are common on GPU clusters, and each needs the plan to say so:

- **A heterogeneous job** (``#SBATCH hetjob``; Slurm sets ``SLURM_HET_SIZE``): component
  0 is a CPU node for the client, component 1 the GPU nodes for the lanes. The batch
  script runs on component 0. The plan holds the client node without GPUs (so no lane
  goes there) and component 1's nodes; the agents' step is started with
  ``--het-group=1``, so it lands on component 1.
- **Outside the allocation** (``salloc`` from a login node; ``SLURM_JOB_ID`` is set but
  ``SLURMD_NODENAME`` is not, since no ``slurmd`` started us): the client runs on this
  host, which the plan adds as a node without GPUs; every allocated node gets lanes. The
  agents dial this host at the address its kernel would use to reach the first node
  (``DDSUP_CONTROL_HOST`` overrides), so a login node with several interfaces is dialled
  on the one the compute nodes share with it.

A job of more than two components is refused: which of them would hold the lanes is
not something to guess.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from dataclasses import dataclass

from ddsup._errors import UsageError
from ddsup.plan._allocation import slurm_hostnames


@dataclass(frozen=True)
class HetJob:
    """The two components of a heterogeneous job: the client's and the lanes'."""

    client_hosts: list[str]  # component 0
    lane_hosts: list[str]  # component ``lane_group``
    lane_group: int
    gpus_per_node: int | None  # what Slurm says of the lane component, if anything


def het_job(environ: Mapping[str, str]) -> HetJob | None:
    """The job's components, or None when it is not heterogeneous."""
    size = environ.get("SLURM_HET_SIZE", "").strip()
    if not size.isdigit() or int(size) < 2:
        return None
    if int(size) > 2:
        raise UsageError(
            f"this heterogeneous job has {size} components; ddsup runs the client on "
            "component 0 and the lanes on component 1: submit two components"
        )
    groups = [environ.get(f"SLURM_JOB_NODELIST_HET_GROUP_{g}", "").strip() for g in (0, 1)]
    if not all(groups):
        raise UsageError(
            "SLURM_HET_SIZE is set but SLURM_JOB_NODELIST_HET_GROUP_0/1 are not: "
            "run ddsup start in the job's batch script"
        )
    gpus = _gpu_count(environ.get("SLURM_GPUS_PER_NODE_HET_GROUP_1", ""))
    return HetJob(slurm_hostnames(groups[0]), slurm_hostnames(groups[1]), 1, gpus)


def _gpu_count(value: str) -> int | None:
    """``8`` or ``a100:8`` (Slurm's ``--gpus-per-node`` as it echoes it) → 8."""
    count = value.strip().rpartition(":")[2]
    return int(count) if count.isdigit() else None


def outside_allocation(environ: Mapping[str, str], hosts: list[str]) -> str | None:
    """This host's name when ``ddsup start`` runs outside the job's nodes (salloc), else None."""
    if environ.get("SLURMD_NODENAME"):
        return None
    name = socket.gethostname()
    return None if name in hosts or name.split(".")[0] in hosts else name


def address_towards(node_address: str, environ: Mapping[str, str]) -> str:
    """The address compute nodes reach this host at: ``DDSUP_CONTROL_HOST``, else the
    source address of a route to ``node_address`` (a UDP connect sends no packet)."""
    chosen = environ.get("DDSUP_CONTROL_HOST", "").strip()
    if chosen:
        return chosen
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((node_address, 9))
            address: str = probe.getsockname()[0]
            return address
    except OSError:
        return socket.gethostname()
