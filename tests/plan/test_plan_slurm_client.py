"""Where the client runs in a Slurm job: a heterogeneous job's component 0, or this host
when ``ddsup start`` runs outside the allocation (``salloc`` on a login node)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from ddsup._errors import UsageError
from ddsup.plan import AllocationRequest, LauncherKind, plan_for, resolve_allocation
from support import units as u

HET = {
    "SLURM_JOB_ID": "5",
    "SLURM_JOB_NODELIST": "cpu1",
    "SLURM_HET_SIZE": "2",
    "SLURM_JOB_NODELIST_HET_GROUP_0": "cpu1",
    "SLURM_JOB_NODELIST_HET_GROUP_1": "gpu[1-2]",
    "SLURMD_NODENAME": "cpu1",
}


@pytest.fixture(autouse=True)
def _no_scontrol(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # python-hostlist; node names are addresses


def test_a_het_job_keeps_the_client_on_component_0_and_the_lanes_on_component_1() -> None:
    environ = {**HET, "SLURM_GPUS_PER_NODE_HET_GROUP_1": "a100:2"}
    allocation = resolve_allocation(AllocationRequest(), environ)
    assert allocation.launcher is LauncherKind.SLURM and allocation.het_group == 1
    assert [(n.name, n.gpus) for n in allocation.nodes] == [
        ("cpu1", ()),
        ("gpu1", (0, 1)),
        ("gpu2", (0, 1)),
    ]
    units = u.unit_set(u.lane("a@", replicas=None), u.endpoint(), u.worker())
    plan = plan_for(units, allocation)
    where = {i.instance: i.node for i in plan.instances}
    assert where == {
        "a@0": "gpu1",
        "a@1": "gpu1",
        "a@2": "gpu2",
        "a@3": "gpu2",
        "endpoint": "cpu1",
        "worker": "cpu1",
    }


def test_a_het_job_needs_its_gpu_count_and_two_components() -> None:
    with pytest.raises(UsageError, match="SLURM_GPUS_PER_NODE_HET_GROUP_1"):
        resolve_allocation(AllocationRequest(), HET)
    assert resolve_allocation(AllocationRequest(gpus_per_node=4), HET).gpus_per_node == 4
    with pytest.raises(UsageError, match="has 3 components"):
        resolve_allocation(AllocationRequest(gpus_per_node=1), {**HET, "SLURM_HET_SIZE": "3"})
    elsewhere = {**HET, "SLURMD_NODENAME": "gpu1"}
    with pytest.raises(UsageError, match="not on the job's component 0"):
        resolve_allocation(AllocationRequest(gpus_per_node=1), elsewhere)


def test_outside_the_allocation_the_client_is_this_host_without_lanes() -> None:
    environ = {
        "SLURM_JOB_ID": "6",
        "SLURM_JOB_NODELIST": "n[1-2]",
        "DDSUP_CONTROL_HOST": "10.9.8.7",
    }
    allocation = resolve_allocation(AllocationRequest(gpus_per_node=1), environ)
    here = socket.gethostname()
    assert [(n.name, n.gpus) for n in allocation.nodes] == [("n1", (0,)), ("n2", (0,)), (here, ())]
    assert (allocation.client, allocation.client_address) == (here, "10.9.8.7")
    plan = plan_for(u.unit_set(u.lane("a@", replicas=None), u.worker()), allocation)
    assert [(i.instance, i.node) for i in plan.instances] == [
        ("a@0", "n1"),
        ("a@1", "n2"),
        ("worker", here),
    ]
