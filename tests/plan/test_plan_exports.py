"""The public surface of ``ddsup.plan``: what other layers may import, and nothing else."""

from __future__ import annotations

import ddsup.plan

EXPECTED = {
    "Allocation",
    "AllocationRequest",
    "GpuList",
    "LOCAL_ADDRESS",
    "LauncherChoice",
    "LauncherKind",
    "Node",
    "PLAN_FORMAT",
    "Plan",
    "PlannedInstance",
    "configure_plan",
    "detect_gpu_list",
    "detect_gpus",
    "expand_nodelist",
    "gpu_holders",
    "lane_order",
    "launcher_kind",
    "local_nodes",
    "make_plan",
    "nodes_from_hosts",
    "nodes_from_nodelist",
    "plan_for",
    "render_plan",
    "resolve_allocation",
    "run_plan",
    "slurm_hostnames",
}


def test_exported_members() -> None:
    # its names are imported when first used (PEP 562): the lazy table, plus whatever
    # the package binds itself, less the machinery of the laziness
    bound = {name for name in vars(ddsup.plan) if not name.startswith("_")}
    public = (bound | set(ddsup.plan._LAZY)) - {"TYPE_CHECKING", "annotations", "lazy_names"}
    assert public == EXPECTED
    for name in EXPECTED:
        member = getattr(ddsup.plan, name)
        module = getattr(member, "__module__", "ddsup.plan._plan")
        assert module.startswith("ddsup.plan."), name
