"""``ddsup plan DIR``: print where every unit instance would run, without starting anything.

The allocation is resolved exactly as ``ddsup start`` resolves it (``_resolve``), so the
plan printed is the plan a run with the same flags in the same environment would use:
inside a Slurm allocation the job's nodes, elsewhere ``--nodes N`` simulated local nodes.
``--nodelist 'gpu[01-04]'`` plans for a Slurm job on those hosts from anywhere.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ddsup._errors import UsageError
from ddsup.plan._render import render_plan
from ddsup.plan._resolve import AllocationRequest, LauncherChoice, plan_for, resolve_allocation
from ddsup.units import UnitSet, load_unit_set, printable


def configure_plan(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``ddsup plan``."""
    parser.description = (
        "Print the placement of every unit instance (node, GPUs, port, replica, rank, "
        "start delay) and a GPU map per node; starts nothing. It is the plan ddsup start "
        "would use with the same flags in the same place."
    )
    parser.add_argument("directory", metavar="DIR", help="directory of unit files")
    parser.add_argument(
        "--launcher",
        choices=[c.value for c in LauncherChoice],
        default=LauncherChoice.AUTO.value,
        help="plan as ddsup start --launcher would (default: slurm inside an allocation)",
    )
    parser.add_argument(
        "--nodelist",
        metavar="EXPR",
        help="plan for a Slurm job on these hosts, e.g. 'gpu[01-04]' (default: the "
        "allocation's, or local nodes)",
    )
    parser.add_argument(
        "--nodes",
        type=int,
        metavar="N",
        help="local: simulate N nodes; Slurm: the first N nodes of the allocation "
        "(default: 1 local, all in Slurm)",
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
    request = AllocationRequest(
        launcher=LauncherChoice(args.launcher),
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        nodelist=args.nodelist,
    )
    allocation = resolve_allocation(request, os.environ)
    if allocation.gpus_from_agents and not allocation.gpus_known:
        raise UsageError(
            "cannot tell how many GPUs the nodes have from here (no CUDA_VISIBLE_DEVICES, "
            "Slurm GPU variables or nvidia-smi): pass --gpus-per-node G (ddsup start asks "
            "each node's agent instead)"
        )
    directory = Path(args.directory)
    if not directory.is_dir():
        raise UsageError(f"{printable(args.directory)}: not a directory of unit files")
    plan = plan_for(_load_units(directory), allocation)
    if allocation.assumed:  # a Slurm plan made away from the nodes it describes
        print(f"ddsup: note: {allocation.assumed}", file=sys.stderr)
    sys.stdout.write(plan.to_json() if args.json else render_plan(plan))
    return 0


def _load_units(directory: Path) -> UnitSet:
    """Load and validate the unit files (a seam for the in-process tests)."""
    return load_unit_set(directory)
