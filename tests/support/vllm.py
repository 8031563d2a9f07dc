"""Real vLLM for the tests: where it is installed, the tiny model, how a lane runs it.

``scripts/setup-vllm`` makes ``.venv-vllm`` (the CPU build of vLLM, apart from the
product's environment) and writes the tiny model; :func:`installed_vllm` finds both, or
says why not, so that the real-vLLM tests can skip locally and fail in CI.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TINY_MODEL_SCRIPT = REPO / "tests" / "vllm" / "tiny_model.py"


@dataclass(frozen=True)
class VllmInstall:
    """An environment with real vLLM and the model its tests serve."""

    venv: Path
    model: Path

    @property
    def bin(self) -> Path:
        return self.venv / "bin"

    @property
    def vllm(self) -> Path:
        return self.bin / "vllm"

    def environment(self) -> dict[str, str]:
        """What a process needs to run ``vllm serve`` from a unit's plain ``vllm`` argv:
        the environment's ``bin`` first on PATH, and settings for a small CPU machine."""
        return {
            "PATH": f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}",
            # The KV cache's size in GiB (the CPU build's default is a share of memory,
            # far more than the tiny model needs, times every lane of a test).
            "VLLM_CPU_KVCACHE_SPACE": "1",
            # The CPU build pins its OpenMP threads to cores by default: lanes started
            # side by side would all pin to the same core of a 2-core machine.
            "VLLM_CPU_OMP_THREADS_BIND": "nobind",
            # Nothing leaves the machine: no model hub, no usage report.
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
        }

    def serve_argv(self, port: int | str, *extra: str) -> list[str]:
        """``vllm serve`` of the tiny model as a lane's unit would write it."""
        return [
            "vllm", "serve", str(self.model), "--port", str(port),
            "--max-model-len", "512", "--dtype", "float32", *extra,
        ]  # fmt: skip


def vllm_venv() -> Path:
    return Path(os.environ.get("DDSUP_VLLM_VENV") or REPO / ".venv-vllm")


def installed_vllm() -> VllmInstall | str:
    """The installed vLLM and its model, or the reason they cannot be had."""
    venv = vllm_venv()
    if not (venv / "bin" / "vllm").is_file():
        return f"no real vLLM at {venv} (run scripts/setup-vllm)"
    try:
        done = subprocess.run(
            [str(venv / "bin" / "python"), str(TINY_MODEL_SCRIPT)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"the tiny model could not be written: {err}"
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return f"the tiny model could not be written: {done.stderr.strip()[-2000:]}"
    return VllmInstall(venv=venv, model=Path(lines[-1]))
