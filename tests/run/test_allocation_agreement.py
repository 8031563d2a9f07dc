"""``ddsup plan`` prints the plan ``ddsup start`` uses, given the same flags and environment.

Each case runs both commands for real and compares ``plan.json``: ``start`` writes it
before it launches anything, and each case makes the run end right after (no ``srun``
on PATH; a ``model_path`` no node can read), so the file is the resolved plan itself.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from support.runs import PY, simulated, start_argv, start_env

UNITS = {
    "lane@.toml": """
[unit]
type = "lane"
[service]
exec = ["sleep", "60"]
[lane]
model = "m"
model_path = "/nonexistent/model"
gpus = 1
port = "auto"
""",
    "endpoint.toml": """
[unit]
type = "endpoint"
[service]
exec = ["ddsup", "endpoint"]
[endpoint]
port = 9000
""",
    "worker.toml": """
[unit]
type = "worker"
[service]
exec = ["true"]
""",
}


def _env(tmp_path: Path, extra: dict[str, str]) -> dict[str, str]:
    """No Slurm, no GPU hints and no tools on PATH, then ``extra``."""
    empty = tmp_path / "empty-path"
    empty.mkdir(exist_ok=True)
    return start_env({"PATH": str(empty), **extra})


def _run(env: dict[str, str], argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)


SLURM = {"SLURM_JOB_ID": "9", "SLURM_JOB_NODELIST": "n[1-3]", "SLURMD_NODENAME": "n2"}


@pytest.mark.parametrize(
    ("environ", "flags", "ends"),
    [
        pytest.param(SLURM, list(simulated(2, 2)), 64, id="slurm"),
        pytest.param({}, list(simulated(2, 2)), 69, id="local"),
    ],
)
def test_plan_prints_what_start_uses(
    tmp_path: Path, environ: dict[str, str], flags: list[str], ends: int
) -> None:
    units = tmp_path / "units"
    units.mkdir()
    for name, text in UNITS.items():
        (units / name).write_text(text)
    env = _env(tmp_path, environ)
    planned = _run(env, [PY, "-m", "ddsup", "plan", str(units), *flags, "--json"])
    assert planned.returncode == 0, planned.stderr
    state = tmp_path / "state"
    started = _run(env, start_argv(units, state, *flags))
    assert started.returncode == ends, started.stdout + started.stderr
    assert (state / "plan.json").read_text() == planned.stdout
    plan = json.loads(planned.stdout)
    assert plan["client"] == ("n2" if environ else "node0")
    assert [n["name"] for n in plan["nodes"]] == (["n1", "n2"] if environ else ["node0", "node1"])
