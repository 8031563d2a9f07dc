"""GPU truth: what the tests can only model, checked on real GPUs by the driver's own view.

ddsup's tests run without a GPU. This script is the check to run on a machine with GPUs
(PyTorch installed; no vLLM or network needed: see ``bench/gpu_truth.sh``). Two claims,
each checked by an oracle that is not ddsup's:

- **No survivors.** Each lane starts a child that calls ``setsid`` and retitles itself
  as vLLM's engine does (``setproctitle`` with a long title, which wipes its environment
  and so ddsup's tag), then holds GPU memory with torch. Once every lane is ready, and
  ``nvidia-smi --query-compute-apps`` lists every holder (the oracle sees them: else the
  check would prove nothing), ``ddsup start`` gets SIGKILL. Within 10 s nvidia-smi must
  list none of the holders, and none of their PIDs may be alive.
- **Own GPUs only.** Each lane's torch sees exactly the GPUs planned for it, by UUID
  (nvidia-smi's index → UUID), no lane shares one, and together they are the job's:
  first with every GPU of the machine, then with a subset given to the job
  (``CUDA_VISIBLE_DEVICES=2,3`` where the machine has 4 GPUs or more; with fewer, the
  last GPU by index, and with one, that GPU by its UUID: lists that are not 0..n-1).

``--fake`` runs the same steps without a GPU, for CI (``tests/process/
test_gpu_truth_script.py``): holders allocate nothing, GPUs are simulated (the subset is
``CUDA_VISIBLE_DEVICES=2,3``), and the survivors' oracle is the holders' own PIDs (each
holder writes its PID itself), alive or not.

Prints one line per check and ``gpu truth: PASS`` or ``gpu truth: FAIL``; exits 0 or 1.
``--json PATH`` writes every figure. Run from the repository root:

    python3 bench/gpu_truth.py [--fake] [--mib 2048] [--json PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SURVIVOR_BOUND_S = 10.0
READY_LIMIT_S = 240.0  # torch's import and CUDA's start-up in every lane at once

# The lane: a child that escapes as vLLM's engine does and holds the GPU memory, and the
# lane process itself answering /health once the child reported what it sees.
HOLDER = r"""
import http.server, json, os, sys, time
host, port, report, mode, mib = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
read_end, write_end = os.pipe()
if os.fork() == 0:
    os.close(read_end)
    os.setsid()
    import setproctitle
    setproctitle.setproctitle("VLLM::EngineCore " + "x" * 200)  # wipes /proc/PID/environ
    seen = {"pid": os.getpid(), "visible": os.environ.get("CUDA_VISIBLE_DEVICES")}
    if mode == "gpu":
        import torch
        count = torch.cuda.device_count()
        seen["uuids"] = [str(torch.cuda.get_device_properties(i).uuid) for i in range(count)]
        held = [torch.empty(mib << 20, dtype=torch.uint8, device=f"cuda:{i}") for i in range(count)]
        torch.cuda.synchronize()
    os.write(write_end, (json.dumps(seen) + "\n").encode())
    os.close(write_end)
    while True:
        time.sleep(3600)
os.close(write_end)
line = b""
while not line.endswith(b"\n"):
    chunk = os.read(read_end, 65536)
    if not chunk:
        sys.exit("the GPU holder died before it reported")
    line += chunk
seen = json.loads(line)
seen["lane_pid"] = os.getpid()
with open(report + ".tmp", "w") as out:
    json.dump(seen, out)
os.rename(report + ".tmp", report)

class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")
    def log_message(self, *args):
        pass

http.server.HTTPServer((host, port), Health).serve_forever()
"""

LANE_UNIT = """\
[unit]
type = "lane"
[service]
exec = {exec}
timeout_start = "{ready_limit}s"
timeout_stop = "5s"
[ready]
http = "http://{{host}}:{{port}}/health"
interval = "200ms"
[lane]
model = "gpu-truth"
gpus = 1
port = "auto"
replicas = "auto"
stagger = "0s"
"""
WORKER_UNIT = """\
[unit]
type = "worker"
after = ["lane"]
[service]
exec = ["sleep", "3600"]
"""


@dataclass
class Scenario:
    """One run of ``ddsup start``: the GPUs the job is given and what came of it."""

    name: str
    given: tuple[str, ...]  # the job's GPU entries, as CUDA_VISIBLE_DEVICES lists them
    visible: str | None  # CUDA_VISIBLE_DEVICES for ddsup start; None: unset
    simulated: int | None = None  # --gpus-per-node (--fake without a subset)
    lanes: dict[str, dict[str, object]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    seen_by_oracle_s: float | None = None
    cleared_s: float | None = None
    survivors: list[int] = field(default_factory=list)
    log_tail: list[str] = field(default_factory=list)  # ddsup start's, when a check failed


# --- the oracle --------------------------------------------------------------------------
# Its own readers of nvidia-smi and /proc, not ddsup's (plan/_gpus, process/_proc): an
# oracle that shared the code under test could not catch that code's mistakes.
def smi_gpus() -> list[tuple[str, str]]:
    """(index, UUID) of each GPU, from nvidia-smi."""
    out = _smi("--query-gpu=index,uuid", "--format=csv,noheader")
    rows = [line.split(",") for line in out.splitlines() if line.strip()]
    return [(index.strip(), uuid.strip()) for index, uuid in rows]


def smi_compute_pids() -> set[int]:
    """The PIDs nvidia-smi lists as holding GPU memory."""
    out = _smi("--query-compute-apps=pid", "--format=csv,noheader,nounits")
    return {int(word) for word in out.split() if word.strip().isdigit()}


def _smi(*args: str) -> str:
    done = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise SystemExit(f"gpu truth: nvidia-smi {' '.join(args)} failed: {done.stderr}")
    return done.stdout


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie is not: it holds nothing)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != b"Z"


# --- one scenario ------------------------------------------------------------------------
def run_scenario(scenario: Scenario, *, fake: bool, mib: int, work: Path) -> None:
    """Start the lanes, check what each sees, SIGKILL ``ddsup start``, time the cleanup."""
    units, state, reports = work / "units", work / "state", work / "reports"
    for directory in (units, reports):
        directory.mkdir(parents=True)
    holder = work / "holder.py"
    holder.write_text(HOLDER)
    argv = [sys.executable, str(holder), "{host}", "{port}", f"{reports}/{{instance}}.json"]
    argv += ["fake" if fake else "gpu", str(mib)]
    exec_line = json.dumps(argv)
    (units / "lane@.toml").write_text(
        LANE_UNIT.format(exec=exec_line, ready_limit=int(READY_LIMIT_S))
    )
    (units / "worker.toml").write_text(WORKER_UNIT)
    start = [sys.executable, "-m", "ddsup", "start", str(units), "--state-dir", str(state)]
    if scenario.simulated is not None:
        start += ["--gpus-per-node", str(scenario.simulated)]
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    if scenario.visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = scenario.visible
    log = (work / "ddsup-start.log").open("wb")
    controller = subprocess.Popen(start, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        if not _wait_ready(scenario, state, reports, controller):
            return
        holders = [int(str(seen["pid"])) for seen in scenario.lanes.values()]
        _check_own_gpus(scenario, fake=fake)
        if not fake and not _oracle_sees(scenario, holders):
            return
        controller.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        controller.wait()
        scenario.cleared_s, scenario.survivors = _wait_cleared(holders, fake=fake, since=killed)
        if scenario.survivors:
            scenario.problems.append(
                f"{len(scenario.survivors)} GPU holders still there {SURVIVOR_BOUND_S:.0f} s"
                f" after SIGKILL of ddsup start: PIDs {scenario.survivors}"
            )
    finally:
        if controller.poll() is None:
            controller.kill()
            controller.wait()
        log.close()
        _kill_left(reports)
        if scenario.problems:
            scenario.log_tail = (work / "ddsup-start.log").read_text().splitlines()[-30:]


def _wait_ready(
    scenario: Scenario, state: Path, reports: Path, controller: subprocess.Popen[bytes]
) -> bool:
    """Until every lane is ready and its holder reported; False (a problem said) if not."""
    deadline = time.monotonic() + READY_LIMIT_S + 30
    while time.monotonic() < deadline:
        if controller.poll() is not None:
            scenario.problems.append(f"ddsup start exited {controller.returncode} before ready")
            return False
        ready = _ready_lanes(state / "events.jsonl")
        if len(ready) == len(scenario.given) and all(
            (reports / f"{lane}.json").exists() for lane in ready
        ):
            for lane in sorted(ready):
                scenario.lanes[lane] = json.loads((reports / f"{lane}.json").read_text())
            return True
        time.sleep(0.2)
    scenario.problems.append(f"not every lane ready within {READY_LIMIT_S + 30:.0f} s")
    return False


def _ready_lanes(events: Path) -> set[str]:
    try:
        lines = events.read_text().splitlines()
    except FileNotFoundError:
        return set()
    ready = set()
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue  # a line being written
        instance = event.get("instance", "")
        if event.get("to") == "ready" and instance.startswith("lane@"):
            ready.add(instance)
    return ready


def _check_own_gpus(scenario: Scenario, *, fake: bool) -> None:
    """Each lane was given one of the job's entries, verbatim, and no two the same one;
    on GPUs, torch in the lane sees that GPU alone (by UUID)."""
    uuid_of = {} if fake else dict(smi_gpus())
    uuid_of.update({uuid: uuid for uuid in uuid_of.values()})  # an entry may be a UUID
    given_to: dict[str, str] = {}
    for lane, seen in scenario.lanes.items():
        entry = str(seen.get("visible"))
        if entry not in scenario.given:
            scenario.problems.append(f"{lane}: CUDA_VISIBLE_DEVICES={entry}, not the job's")
        elif entry in given_to:
            scenario.problems.append(f"{lane} and {given_to[entry]} both got GPU {entry}")
        given_to[entry] = lane
        if fake:
            continue
        expected = [uuid_of.get(entry, "?").removeprefix("GPU-").lower()]
        uuids = seen.get("uuids")
        listed = uuids if isinstance(uuids, list) else []
        seen_uuids = [str(u).removeprefix("GPU-").lower() for u in listed]
        if seen_uuids != expected:
            scenario.problems.append(
                f"{lane}: torch sees {seen.get('uuids')}, planned {entry} = {expected}"
            )
    missing = sorted(set(scenario.given) - set(given_to))
    if missing:
        scenario.problems.append(f"the job's GPUs {missing} went to no lane")


def _oracle_sees(scenario: Scenario, holders: Sequence[int]) -> bool:
    """nvidia-smi lists every holder (it may lag their allocation by a moment)."""
    began = time.monotonic()
    while time.monotonic() - began < 10:
        if set(holders) <= smi_compute_pids():
            scenario.seen_by_oracle_s = time.monotonic() - began
            return True
        time.sleep(0.1)
    unseen = sorted(set(holders) - smi_compute_pids())
    scenario.problems.append(f"nvidia-smi does not list the holders {unseen}: no oracle")
    return False


def _wait_cleared(
    holders: Sequence[int], *, fake: bool, since: float, bound: float = SURVIVOR_BOUND_S
) -> tuple[float, list[int]]:
    """Seconds from the SIGKILL until no holder is listed (nor alive), and who is left
    ``bound`` seconds after it."""
    while True:
        left = {pid for pid in holders if alive(pid)}
        if not fake:
            left |= smi_compute_pids() & set(holders)
        waited = time.monotonic() - since
        if not left or waited > bound:
            return waited, sorted(left)
        time.sleep(0.05)


def _kill_left(reports: Path) -> None:
    """A failed check must not leave GPU memory held on the machine: every process a
    lane reported, whether or not the run got as far as the check."""
    for path in reports.glob("*.json"):
        seen = json.loads(path.read_text())
        for pid in (int(seen["pid"]), int(seen["lane_pid"])):
            if alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


# --- the scenarios -----------------------------------------------------------------------
def scenarios(fake: bool) -> list[Scenario]:
    """Every GPU of the machine, then a subset that is not 0..n-1."""
    if fake:
        return [
            Scenario("every GPU (2 simulated)", ("0", "1"), None, simulated=2),
            Scenario("subset CUDA_VISIBLE_DEVICES=2,3", ("2", "3"), "2,3"),
        ]
    gpus = smi_gpus()
    every = tuple(index for index, _uuid in gpus)
    if len(gpus) >= 4:
        subset: tuple[str, ...] = ("2", "3")
    elif len(gpus) >= 2:
        subset = (gpus[-1][0],)
    else:
        subset = (gpus[0][1],)  # one GPU: named by its UUID
    return [
        Scenario(f"every GPU ({len(gpus)})", every, None),
        Scenario(f"subset CUDA_VISIBLE_DEVICES={','.join(subset)}", subset, ",".join(subset)),
    ]


def report(results: Sequence[Scenario], out: Mapping[str, object]) -> bool:
    ok = True
    for scenario in results:
        cleared = "-" if scenario.cleared_s is None else f"{scenario.cleared_s:.2f} s"
        print(f"{scenario.name}: {len(scenario.lanes)} lanes; after SIGKILL cleared in {cleared}")
        for lane, seen in scenario.lanes.items():
            print(f"  {lane}: CUDA_VISIBLE_DEVICES={seen.get('visible')} sees {seen.get('uuids')}")
        for problem in scenario.problems:
            print(f"  PROBLEM: {problem}")
        for line in scenario.log_tail:
            print(f"  | {line}")
        ok = ok and not scenario.problems
    print(f"machine: {json.dumps(out)}")
    print(f"gpu truth: {'PASS' if ok else 'FAIL'}")
    return ok


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fake", action="store_true", help="no GPU: simulated, for CI")
    parser.add_argument("--mib", type=int, default=2048, help="GPU memory each holder takes")
    parser.add_argument("--json", type=Path, help="write every figure here")
    args = parser.parse_args(argv)
    machine: dict[str, object] = {"fake": args.fake}
    if not args.fake:
        if shutil.which("nvidia-smi") is None:
            print("gpu truth: no nvidia-smi here (use --fake without a GPU)")
            return 2
        machine["gpus"] = smi_gpus()
    results = []
    for scenario in scenarios(args.fake):
        with tempfile.TemporaryDirectory(prefix="gpu-truth-") as work:
            run_scenario(scenario, fake=args.fake, mib=args.mib, work=Path(work))
        results.append(scenario)
    ok = report(results, machine)
    if args.json is not None:
        figures = {"machine": machine, "scenarios": [asdict(s) for s in results], "pass": ok}
        args.json.write_text(json.dumps(figures, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
