"""``ddsup plan DIR``: print where every unit instance would run, without starting anything.

Hosts, in order of precedence:

1. ``--nodelist EXPR`` (a Slurm nodelist such as ``gpu[01-04]``);
2. ``--nodes N``: N simulated nodes on this machine (``node0`` …), as the local
   launcher runs them; an explicit ``--nodes`` wins over ``SLURM_JOB_NODELIST``;
3. ``SLURM_JOB_NODELIST`` (inside an allocation), expanded by ``scontrol show
   hostnames`` when available, else by python-hostlist;
4. one simulated node.

The client (endpoint, worker) is the first host: in a Slurm batch script, ``ddsup
start`` runs on the first node of the allocation. Simulated nodes share 127.0.0.1, so
their ports are planned unique across nodes; so are the ports of a nodelist that names
one address more than once.

GPUs per node: ``--gpus-per-node``, else detected (see :func:`detect_gpus`), else a
usage error asking for ``--gpus-per-node``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ddsup._errors import UsageError
from ddsup.plan._allocation import (
    detect_gpus,
    local_nodes,
    nodes_from_hosts,
    nodes_from_nodelist,
    slurm_hostnames,
)
from ddsup.plan._model import Node
from ddsup.plan._placement import make_plan
from ddsup.plan._render import render_plan
from ddsup.units import load_unit_set, printable
from ddsup.units._model import UnitSet


def configure_plan(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``ddsup plan``."""
    parser.description = "Print the placement of every unit instance; starts nothing."
    parser.add_argument("directory", metavar="DIR", help="directory of unit files")
    parser.add_argument(
        "--nodelist",
        metavar="EXPR",
        help="Slurm nodelist to plan for, e.g. 'gpu[01-04]' (default: $SLURM_JOB_NODELIST)",
    )
    parser.add_argument(
        "--nodes",
        type=int,
        metavar="N",
        help="simulate N nodes on this machine, as the local launcher does (default: 1)",
    )
    parser.add_argument(
        "--gpus-per-node",
        type=int,
        metavar="G",
        help="GPUs of each node (default: detected from CUDA_VISIBLE_DEVICES, Slurm, nvidia-smi)",
    )
    parser.add_argument("--json", action="store_true", help="print plan.json instead of a table")


def run_plan(args: argparse.Namespace) -> int:
    """Plan and print; errors propagate as DdsupError (64 usage, 65 units, 69 placement)."""
    allocation = allocation_from_args(args.nodelist, args.nodes, args.gpus_per_node, os.environ)
    directory = Path(args.directory)
    if not directory.is_dir():
        raise UsageError(f"{printable(args.directory)}: not a directory of unit files")
    plan = make_plan(
        _load_units(directory),
        allocation.nodes,
        client=allocation.client,
        shared_address=allocation.shared_address,
    )
    sys.stdout.write(plan.to_json() if args.json else render_plan(plan))
    return 0


@dataclass(frozen=True)
class Allocation:
    """The hosts a plan is made for, and whether they share one address."""

    nodes: tuple[Node, ...]
    client: str
    shared_address: bool


def allocation_from_args(
    nodelist: str | None,
    nodes: int | None,
    gpus_per_node: int | None,
    environ: Mapping[str, str],
) -> Allocation:
    """Resolve the command line (and the Slurm environment) into an :class:`Allocation`."""
    if nodelist is not None and nodes is not None:
        raise UsageError("--nodelist and --nodes exclude each other: give one of them")
    gpus = _gpus(gpus_per_node, environ)
    slurm_list = environ.get("SLURM_JOB_NODELIST", "").strip()
    if nodelist is not None:
        found = nodes_from_nodelist(nodelist, gpus)
    elif nodes is None and slurm_list:
        found = nodes_from_hosts(slurm_hostnames(slurm_list), gpus)
    else:
        local = local_nodes(1 if nodes is None else nodes, gpus)
        return Allocation(tuple(local), local[0].name, shared_address=True)
    shared = len({n.address for n in found}) < len(found)
    return Allocation(tuple(found), found[0].name, shared_address=shared)


def _gpus(gpus_per_node: int | None, environ: Mapping[str, str]) -> int:
    if gpus_per_node is not None:
        if gpus_per_node < 0:
            raise UsageError(f"--gpus-per-node must be 0 or more (got {gpus_per_node})")
        return gpus_per_node
    detected = detect_gpus(environ)
    if detected is None:
        raise UsageError(
            "cannot tell how many GPUs each node has (no CUDA_VISIBLE_DEVICES, Slurm GPU "
            "variables or nvidia-smi): pass --gpus-per-node G"
        )
    return detected


def _load_units(directory: Path) -> UnitSet:
    """Load and validate the unit files."""
    return load_unit_set(directory)
