"""Placement: unit files + an allocation (hosts x GPUs) → a deterministic :class:`Plan`.

Layering, bottom up: ``_plan`` (the frozen plan data), ``_allocation`` (hosts and GPU
counts from nodelists, Slurm, the environment), ``_shortage`` (why lanes do not fit),
``_placement`` (the pure placement rules), ``_slurm_client`` (where the client runs in a
heterogeneous job or outside the allocation), ``_resolve`` (what the flags ask, launcher
and sizes, and the one allocation resolver of ``plan`` and ``start``), ``_render`` (the human table), ``_plan_command`` (``ddsup plan``).

Its names are imported when first used (PEP 562, ``ddsup._lazy``): a node agent that
needs the plan's data does not pay for the placement rules or ``ddsup plan``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ddsup._lazy import lazy_names

if TYPE_CHECKING:
    from ddsup.plan._allocation import LOCAL_ADDRESS as LOCAL_ADDRESS
    from ddsup.plan._allocation import detect_gpus as detect_gpus
    from ddsup.plan._allocation import expand_nodelist as expand_nodelist
    from ddsup.plan._allocation import local_nodes as local_nodes
    from ddsup.plan._allocation import nodes_from_hosts as nodes_from_hosts
    from ddsup.plan._allocation import nodes_from_nodelist as nodes_from_nodelist
    from ddsup.plan._allocation import slurm_hostnames as slurm_hostnames
    from ddsup.plan._gpus import GpuList as GpuList
    from ddsup.plan._gpus import detect_gpu_list as detect_gpu_list
    from ddsup.plan._gpus import gpu_holders as gpu_holders
    from ddsup.plan._placement import lane_order as lane_order
    from ddsup.plan._placement import make_plan as make_plan
    from ddsup.plan._plan import PLAN_FORMAT as PLAN_FORMAT
    from ddsup.plan._plan import Node as Node
    from ddsup.plan._plan import Plan as Plan
    from ddsup.plan._plan import PlannedInstance as PlannedInstance
    from ddsup.plan._plan_command import configure_plan as configure_plan
    from ddsup.plan._plan_command import run_plan as run_plan
    from ddsup.plan._render import render_plan as render_plan
    from ddsup.plan._resolve import Allocation as Allocation
    from ddsup.plan._resolve import AllocationRequest as AllocationRequest
    from ddsup.plan._resolve import LauncherChoice as LauncherChoice
    from ddsup.plan._resolve import LauncherKind as LauncherKind
    from ddsup.plan._resolve import launcher_kind as launcher_kind
    from ddsup.plan._resolve import plan_for as plan_for
    from ddsup.plan._resolve import resolve_allocation as resolve_allocation

_LAZY = {
    "LOCAL_ADDRESS": "ddsup.plan._allocation",
    "GpuList": "ddsup.plan._gpus",
    "detect_gpu_list": "ddsup.plan._gpus",
    "gpu_holders": "ddsup.plan._gpus",
    "launcher_kind": "ddsup.plan._resolve",
    "detect_gpus": "ddsup.plan._allocation",
    "expand_nodelist": "ddsup.plan._allocation",
    "local_nodes": "ddsup.plan._allocation",
    "nodes_from_hosts": "ddsup.plan._allocation",
    "nodes_from_nodelist": "ddsup.plan._allocation",
    "slurm_hostnames": "ddsup.plan._allocation",
    "configure_plan": "ddsup.plan._plan_command",
    "run_plan": "ddsup.plan._plan_command",
    "PLAN_FORMAT": "ddsup.plan._plan",
    "Node": "ddsup.plan._plan",
    "Plan": "ddsup.plan._plan",
    "PlannedInstance": "ddsup.plan._plan",
    "lane_order": "ddsup.plan._placement",
    "make_plan": "ddsup.plan._placement",
    "render_plan": "ddsup.plan._render",
    "Allocation": "ddsup.plan._resolve",
    "AllocationRequest": "ddsup.plan._resolve",
    "LauncherChoice": "ddsup.plan._resolve",
    "LauncherKind": "ddsup.plan._resolve",
    "plan_for": "ddsup.plan._resolve",
    "resolve_allocation": "ddsup.plan._resolve",
}

__getattr__ = lazy_names(__name__, _LAZY, globals())
