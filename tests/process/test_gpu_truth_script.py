"""``bench/gpu_truth.py`` (the check to run on a machine with GPUs) kept working without one.

Its ``--fake`` mode runs the same steps on simulated GPUs: lanes whose setsid,
setproctitle'd child stands in for a GPU holder, SIGKILL of ``ddsup start``, the
holders' own PIDs as the survivors' oracle, and the GPUs each lane was given, with every
GPU and with ``CUDA_VISIBLE_DEVICES=2,3``. Its GPU mode runs here too, against a stand-in
driver (an ``nvidia-smi`` that lists this test's retitled holders, and a ``torch`` that
reports the UUIDs its ``CUDA_VISIBLE_DEVICES`` names), so a run on scarce GPU time is
not spent on a bug of the script. The checks themselves must catch what they
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


FAKE_SMI = """\
#!{python}
import os, sys
UUIDS = ["GPU-00000000-0000-0000-0000-00000000000%d" % i for i in range(4)]
ROOT = {root}

def descends(pid):  # this test's processes only: never another suite's "engines"
    while pid > 1:
        if pid == ROOT:
            return True
        try:
            stat = open("/proc/%d/stat" % pid, "rb").read()
        except OSError:
            return False
        pid = int(stat.rsplit(b")", 1)[1].split()[1])
    return False

args = sys.argv[1:]
if args == ["-L"]:
    for i, uuid in enumerate(UUIDS):
        print("GPU %d: NVIDIA H200 (UUID: %s)" % (i, uuid))
elif args == ["--query-gpu=index,uuid", "--format=csv,noheader"]:
    for i, uuid in enumerate(UUIDS):
        print("%d, %s" % (i, uuid))
elif args and args[0].startswith("--query-compute-apps="):
    for name in os.listdir("/proc"):
        try:
            title = open("/proc/%s/cmdline" % name, "rb").read()
        except OSError:
            continue
        if title.startswith(b"VLLM::EngineCore") and descends(int(name)):
            print(name if args[0].endswith("=pid") else "%s, %s, 2048" % (UUIDS[0], name))
else:
    sys.exit(2)
"""
FAKE_TORCH = """\
import os
uint8 = "uint8"

def _entries():
    return [e.strip() for e in os.environ.get("CUDA_VISIBLE_DEVICES", "0,1,2,3").split(",")]

class _Properties:
    def __init__(self, entry):
        self.uuid = entry[4:] if entry.startswith("GPU-") else "00000000-0000-0000-0000-%012d" % int(entry)

class cuda:
    device_count = staticmethod(lambda: len(_entries()))
    get_device_properties = staticmethod(lambda i: _Properties(_entries()[i]))
    synchronize = staticmethod(lambda: None)

def empty(size, dtype=None, device=None):
    return bytearray(0)
"""


def test_gpu_mode_against_a_stand_in_driver(tmp_path: Path) -> None:
    """Four GPUs: every GPU, then ``CUDA_VISIBLE_DEVICES=2,3``; the driver's view is the
    oracle (it must list the holders before the SIGKILL and none after)."""
    (tmp_path / "bin").mkdir()
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.write_text(FAKE_SMI.format(python=sys.executable, root=os.getpid()))
    smi.chmod(0o755)
    (tmp_path / "py" / "torch").mkdir(parents=True)
    (tmp_path / "py" / "torch" / "__init__.py").write_text(FAKE_TORCH)
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path / "py"), env.get("PYTHONPATH")]))
    env.pop("CUDA_VISIBLE_DEVICES", None)
    figures = tmp_path / "truth.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu_truth.py"), "--json", str(figures)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    every, subset = json.loads(figures.read_text())["scenarios"]
    assert len(every["lanes"]) == 4 and every["seen_by_oracle_s"] is not None
    assert sorted(seen["uuids"][0][-1] for seen in subset["lanes"].values()) == ["2", "3"]
    assert subset["survivors"] == [] and subset["cleared_s"] <= truth.SURVIVOR_BOUND_S


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
