"""The vLLM examples run on the vLLM this tier installs: every flag of theirs is its own.

Each example's header names the vLLM release it is tested with; this holds the header
and the flags to the installed ``vllm serve`` (its ``--help=all``, the parser itself).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from ddsup.units import load_unit_set
from support.vllm import VllmInstall

EXAMPLES = Path(__file__).resolve().parents[2] / "units" / "examples"


def _installed_version(real_vllm: VllmInstall) -> str:
    code = "import importlib.metadata as m; print(m.version('vllm'))"
    done = subprocess.run(
        [str(real_vllm.bin / "python"), "-c", code], capture_output=True, text=True, check=True
    )
    return done.stdout.strip().split("+")[0]  # 0.32.0+cpu: the release, 0.32.0


def _serve_flags(real_vllm: VllmInstall) -> set[str]:
    done = subprocess.run(
        [str(real_vllm.vllm), "serve", "--help=all"],
        capture_output=True, text=True, timeout=300, check=True,
        env=real_vllm.environment() | {"HOME": str(Path.home())},
    )  # fmt: skip
    return set(re.findall(r"(?<![\w-])(--[a-z0-9][\w-]*)", done.stdout))


def test_every_flag_of_the_vllm_examples_is_one_of_the_installed_vllm(
    real_vllm: VllmInstall,
) -> None:
    version = _installed_version(real_vllm)
    flags = _serve_flags(real_vllm)
    assert {"--port", "--tensor-parallel-size"} <= flags  # the help was read
    lanes = sorted(EXAMPLES.glob("*/lane@.toml"))
    runs_vllm = [p.parent for p in lanes if '"vllm", "serve"' in p.read_text(encoding="utf-8")]
    assert {"vllm-llama-8b", "long-job"} <= {p.name for p in runs_vllm}
    for directory in runs_vllm:
        text = (directory / "lane@.toml").read_text(encoding="utf-8")
        header = " ".join(line.lstrip("# ") for line in text.splitlines() if line[:1] == "#")
        assert f"in vLLM {version} (" in header, f"{directory.name}: header names another vLLM"
        lane = load_unit_set(directory).lanes[0]
        used = {
            a.split("=", 1)[0] for a in [*lane.service.exec, *(lane.service.exec_follower or ())]
        }
        unknown = {a for a in used if a.startswith("--")} - flags
        assert not unknown, f"{directory.name}: not flags of vllm serve {version}: {unknown}"
