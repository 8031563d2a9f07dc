"""The public surface of ``ddsup._plan``: what other layers may import, and nothing else."""

from __future__ import annotations

import ddsup._plan

EXPECTED = {
    "PLAN_FORMAT",
    "Allocation",
    "Node",
    "Plan",
    "PlannedInstance",
    "allocation_from_args",
    "configure_plan",
    "detect_gpus",
    "expand_nodelist",
    "lane_order",
    "local_nodes",
    "make_plan",
    "nodes_from_hosts",
    "nodes_from_nodelist",
    "render_plan",
    "run_plan",
    "slurm_hostnames",
}


def test_exported_members() -> None:
    public = {name for name in vars(ddsup._plan) if not name.startswith("_")} - {"annotations"}
    assert public == EXPECTED
    for name in EXPECTED:
        member = getattr(ddsup._plan, name)
        module = getattr(member, "__module__", "ddsup._plan._model")
        assert module.startswith("ddsup._plan."), name
