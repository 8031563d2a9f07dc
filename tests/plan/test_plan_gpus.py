"""The GPUs a job was given on a node: entries kept verbatim, in the order CUDA reads them.

Position i of a plan is the i-th entry; lanes get the entries themselves (indices, UUIDs,
MIG devices), so these pin where the entries come from and how they are read.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ddsup.plan._gpus import GpuHolder, GpuList, detect_gpu_list, gpu_holders, parse_smi_listing
from support.fake_smi import FakeApp, FakeGpu, FakeSmi

A100_MIG = """\
GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77)
  MIG 1g.5gb      Device  0: (UUID: MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f)
  MIG 1g.5gb      Device  1: (UUID: MIG-cba663e8-9bed-5b25-b243-5985ef7c9beb)
GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-8f2c1b0e-0000-1111-2222-333344445555)
"""


@pytest.mark.parametrize(
    ("environ", "devices", "source"),
    [
        ({"CUDA_VISIBLE_DEVICES": "4,5"}, ("4", "5"), "CUDA_VISIBLE_DEVICES"),
        ({"CUDA_VISIBLE_DEVICES": "GPU-aaa, GPU-bbb"}, ("GPU-aaa", "GPU-bbb"), None),
        ({"CUDA_VISIBLE_DEVICES": "MIG-1d3e,MIG-GPU-9/1/0"}, ("MIG-1d3e", "MIG-GPU-9/1/0"), None),
        ({"CUDA_VISIBLE_DEVICES": "6,-1,7"}, ("6",), None),  # CUDA stops at the invalid one
        ({"CUDA_VISIBLE_DEVICES": ""}, (), None),
        ({"CUDA_VISIBLE_DEVICES": "2", "SLURM_STEP_GPUS": "0-3"}, ("2",), None),
        # the job's list is the batch node's: a step's own list comes first
        ({"SLURM_STEP_GPUS": "2,3", "SLURM_JOB_GPUS": "0,1"}, ("2", "3"), "SLURM_STEP_GPUS"),
        ({"SLURM_JOB_GPUS": "0-2,6"}, ("0", "1", "2", "6"), "SLURM_JOB_GPUS"),
        ({"SLURM_GPUS_ON_NODE": "3"}, ("0", "1", "2"), "SLURM_GPUS_ON_NODE"),
    ],
)
def test_entries_from_the_environment(
    environ: dict[str, str], devices: tuple[str, ...], source: str | None
) -> None:
    found = detect_gpu_list(environ, nvidia_smi=False)
    assert found is not None
    assert found.devices == devices
    if source is not None:
        assert found.source == source


def test_nothing_said_is_none() -> None:
    assert detect_gpu_list({}, nvidia_smi=False) is None


def test_nvidia_smi_lists_gpus_by_index_and_mig_devices_by_uuid() -> None:
    assert parse_smi_listing(A100_MIG) == (
        "MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f",
        "MIG-cba663e8-9bed-5b25-b243-5985ef7c9beb",
        "1",
    )


def test_nvidia_smi_on_path_is_asked_last(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    smi = FakeSmi([FakeGpu("GPU-a"), FakeGpu("GPU-b", migs=("MIG-b0", "MIG-b1")), FakeGpu("GPU-c")])
    monkeypatch.setenv("PATH", f"{smi.install(tmp_path)}{os.pathsep}{os.environ['PATH']}")
    assert detect_gpu_list({}) == GpuList(("0", "MIG-b0", "MIG-b1", "2"), "nvidia-smi")
    assert detect_gpu_list({"CUDA_VISIBLE_DEVICES": "1"}) == GpuList(("1",), "CUDA_VISIBLE_DEVICES")


def test_holders_are_matched_by_index_or_uuid_prefix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gpus = [FakeGpu(f"GPU-{c}{c}{c}-0") for c in "abcd"]
    apps = [FakeApp(1, 4242, 20480), FakeApp(3, 77, 512), FakeApp(0, 9, 1)]
    monkeypatch.setenv("PATH", f"{FakeSmi(gpus, apps).install(tmp_path)}{os.pathsep}/usr/bin")
    assert gpu_holders(["1", "GPU-ddd", "2"]) == [
        GpuHolder("1", 4242, 20480),
        GpuHolder("GPU-ddd", 77, 512),
    ]


def test_holders_without_nvidia_smi_are_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    assert gpu_holders(["0"]) is None


@pytest.mark.parametrize(
    ("count", "parts", "sizes"), [(8, 2, [4, 4]), (5, 2, [3, 2]), (1, 2, [1, 0]), (0, 3, [0, 0, 0])]
)
def test_simulated_nodes_share_this_machines_gpus_in_order(
    count: int, parts: int, sizes: list[int]
) -> None:
    whole = GpuList(tuple(f"GPU-{i}" for i in range(count)), "nvidia-smi")
    shares = whole.split(parts)
    assert [len(s.devices) for s in shares] == sizes
    assert tuple(d for s in shares for d in s.devices) == whole.devices


def test_describe_names_the_evidence() -> None:
    assert GpuList(("4", "5"), "CUDA_VISIBLE_DEVICES").describe() == (
        "2 GPUs (CUDA_VISIBLE_DEVICES=4,5)"
    )
    assert GpuList.simulated(1).describe() == "1 GPU (simulated)"
