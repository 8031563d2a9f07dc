"""Hosts from nodelists and Slurm, simulated local nodes, GPU detection."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ddsup._errors import UsageError
from ddsup.plan import Node, detect_gpus, local_nodes, nodes_from_nodelist, slurm_hostnames


def test_nodelist_expands_in_order() -> None:
    found = nodes_from_nodelist("gpu[01-03],login1", 2)
    assert found == [
        Node("gpu01", "gpu01", (0, 1)),
        Node("gpu02", "gpu02", (0, 1)),
        Node("gpu03", "gpu03", (0, 1)),
        Node("login1", "login1", (0, 1)),
    ]


@pytest.mark.parametrize("expr", ["gpu[01-", "gpu[3-1]", "", "  "])
def test_bad_nodelist_is_a_usage_error(expr: str) -> None:
    with pytest.raises(UsageError, match="bad nodelist") as info:
        nodes_from_nodelist(expr, 8)
    assert info.value.exit_status == 64


def test_negative_gpus_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="--gpus-per-node"):
        nodes_from_nodelist("a", -1)


def test_local_nodes() -> None:
    assert local_nodes(2, 1) == [Node("node0", "127.0.0.1", (0,)), Node("node1", "127.0.0.1", (0,))]
    with pytest.raises(UsageError, match="--nodes must be at least 1"):
        local_nodes(0, 8)


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"CUDA_VISIBLE_DEVICES": "0,1,2"}, 3),
        ({"CUDA_VISIBLE_DEVICES": "GPU-1a2b,GPU-3c4d"}, 2),
        ({"CUDA_VISIBLE_DEVICES": ""}, 0),
        ({"CUDA_VISIBLE_DEVICES": "0,-1,2"}, 1),
        ({"CUDA_VISIBLE_DEVICES": "1", "SLURM_JOB_GPUS": "0,1,2,3"}, 1),
        ({"SLURM_STEP_GPUS": "4,5", "SLURM_JOB_GPUS": "0-7"}, 2),
        ({"SLURM_JOB_GPUS": "0-3,6"}, 5),
        ({"SLURM_GPUS_ON_NODE": "4"}, 4),
        ({}, None),
    ],
)
def test_detect_gpus_from_environment(environ: dict[str, str], expected: int | None) -> None:
    assert detect_gpus(environ, nvidia_smi=False) == expected


def _fake_tool(directory: Path, name: str, script: str) -> None:
    path = directory / name
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_detect_gpus_from_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_tool(
        tmp_path,
        "nvidia-smi",
        'echo "GPU 0: NVIDIA H100 (UUID: GPU-a)"; echo "GPU 1: NVIDIA H100 (UUID: GPU-b)"',
    )
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert detect_gpus({}) == 2


def test_detect_gpus_nvidia_smi_failure_is_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_tool(tmp_path, "nvidia-smi", "echo 'NVIDIA-SMI has failed' >&2; exit 9")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert detect_gpus({}) is None


def test_slurm_hostnames_uses_scontrol(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_tool(tmp_path, "scontrol", 'test "$1 $2" = "show hostnames" && printf "b1\\na2\\n"')
    monkeypatch.setenv("PATH", str(tmp_path))
    assert slurm_hostnames("whatever[1-2]") == ["b1", "a2"]


def test_slurm_hostnames_scontrol_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_tool(tmp_path, "scontrol", "echo 'scontrol: error: bad list' >&2; exit 1")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(UsageError, match="scontrol: error: bad list"):
        slurm_hostnames("x[")


def test_slurm_hostnames_without_scontrol(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert slurm_hostnames("n[1-2]") == ["n1", "n2"]
