"""A machine without GPUs: ``ddsup start`` and ``ddsup plan`` say how to simulate them.

Run as a user runs them on a laptop: a real subprocess, with no GPU in sight (no
``CUDA_VISIBLE_DEVICES``, no Slurm variables, no ``nvidia-smi`` on ``PATH``), or with
``CUDA_VISIBLE_DEVICES=""`` (GPUs hidden, as on a CPU node of a GPU cluster). The units
are the rehearsal example's, whose lane unit already says ``replicas = "auto"``: the
message must not suggest it again.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REHEARSAL = Path(__file__).resolve().parents[2] / "units" / "examples" / "rehearsal"
HINT = "simulate them with --gpus-per-node G (e.g. --gpus-per-node 2)"


def _environ(visible: str | None) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("SLURM") and k != "CUDA_VISIBLE_DEVICES"
    }
    env["PATH"] = str(Path(sys.executable).parent)  # no nvidia-smi
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    return env


def ddsup(*args: str | Path, visible: str | None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ddsup", *map(str, args)],
        capture_output=True,
        text=True,
        env=_environ(visible),
        check=False,
        timeout=60,
    )


@pytest.mark.parametrize("visible", [None, ""], ids=["laptop", "gpus-hidden"])
def test_start_says_how_to_simulate_gpus(tmp_path: Path, visible: str | None) -> None:
    state = tmp_path / "state"
    done = ddsup("start", REHEARSAL, "--launcher", "local", "--state-dir", state, visible=visible)
    assert done.returncode == 69, done.stderr
    assert done.stderr.count(HINT) == 1
    assert 'use replicas = "auto"' not in done.stderr
    assert not state.exists()  # the plan does not fit: nothing began


def test_plan_says_how_to_simulate_gpus() -> None:
    for args, visible in ((["--gpus-per-node", "0"], None), ([], "")):
        done = ddsup("plan", REHEARSAL, *args, visible=visible)
        assert done.returncode == 69, done.stderr
        assert done.stderr == (
            "ddsup: error: lane unit 'lane@' asks for replicas = \"auto\" (at least 1) of "
            "1 GPU, but the allocation has 1 node x 0 GPUs = 0 GPUs. Without GPUs (a laptop, "
            f"CI, a CPU node), {HINT} and let `ddsup fake-vllm` lanes stand in for vLLM\n"
        )


def test_plan_without_any_gpu_information_asks_for_it() -> None:
    """As ``ddsup start`` does: no GPU found is 0 GPUs per node, and the lanes cannot fit."""
    done = ddsup("plan", REHEARSAL, visible=None)
    assert done.returncode == 69
    assert done.stderr.rstrip().endswith("pass --gpus-per-node G)")
