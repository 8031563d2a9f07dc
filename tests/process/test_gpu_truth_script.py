"""``bench/gpu_truth.py`` (the check to run where a GPU is lent) kept working without one.

Its ``--fake`` mode runs the same steps on simulated GPUs: lanes whose setsid,
setproctitle'd child stands in for a GPU holder, SIGKILL of ``ddsup start``, the
holders' own PIDs as the survivors' oracle, and the GPUs each lane was given, with every
GPU and with ``CUDA_VISIBLE_DEVICES=2,3``. The checks themselves must catch what they
look for: a holder that survives, a GPU given twice or one the job does not have.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_truth", ROOT / "bench" / "gpu_truth.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gpu_truth", module)
    spec.loader.exec_module(module)
    return module


truth = _load_script()


def test_fake_run_passes_and_leaves_no_holder(tmp_path: Path) -> None:
    figures = tmp_path / "truth.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu_truth.py"), "--fake", "--json", str(figures)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.rstrip().endswith("gpu truth: PASS")
    result = json.loads(figures.read_text())
    every, subset = result["scenarios"]
    assert {seen["visible"] for seen in every["lanes"].values()} == {"0", "1"}
    assert {seen["visible"] for seen in subset["lanes"].values()} == {"2", "3"}
    for scenario in (every, subset):
        assert scenario["survivors"] == [] and scenario["problems"] == []
        assert scenario["cleared_s"] <= truth.SURVIVOR_BOUND_S
        for seen in scenario["lanes"].values():  # the oracle's own view, not the script's
            assert not truth.alive(seen["pid"]) and not truth.alive(seen["lane_pid"])


def test_a_holder_that_survives_is_caught() -> None:
    survivor = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        waited, left = truth._wait_cleared(
            [survivor.pid], fake=True, since=time.monotonic(), bound=0.3
        )
        assert left == [survivor.pid] and waited > 0.3
    finally:
        os.kill(survivor.pid, signal.SIGKILL)
        survivor.wait()
    assert truth._wait_cleared([survivor.pid], fake=True, since=time.monotonic())[1] == []


def test_a_gpu_given_twice_or_not_the_jobs_is_caught() -> None:
    scenario = truth.Scenario("subset", ("2", "3"), "2,3")
    scenario.lanes = {"lane@0": {"visible": "2"}, "lane@1": {"visible": "2"}}
    truth._check_own_gpus(scenario, fake=True)
    assert any("both got GPU 2" in p for p in scenario.problems), scenario.problems
    assert any("['3'] went to no lane" in p for p in scenario.problems), scenario.problems
    foreign = truth.Scenario("subset", ("2", "3"), "2,3")
    foreign.lanes = {"lane@0": {"visible": "0"}, "lane@1": {"visible": "3"}}
    truth._check_own_gpus(foreign, fake=True)
    assert any("CUDA_VISIBLE_DEVICES=0, not the job's" in p for p in foreign.problems)
