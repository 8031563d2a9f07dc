"""Long jobs: how fast a hung lane leaves the rotation and is restarted, and what a lost
node costs the worker.

Run: ``.venv/bin/python bench/long_jobs.py [--runs 5] [--interval 1s] [--failures 3]
[--skip-slurm]``.

**liveness** (local, ``--nodes 1 --gpus-per-node 2``): two ``ddsup fake-vllm`` lanes
behind the endpoint, ``[ready] liveness_interval = --interval``, ``liveness_failures =
--failures``. Each run waits a random part of an interval after both lanes are ready
(so the freeze falls anywhere in the probe cycle), SIGSTOPs lane@0 and reads
``events.jsonl``: from the SIGSTOP to

- *eject*: its ``ready → unresponsive`` transition (the controller takes it out of the
  endpoint's rotation as it records that event);
- *kill*: its process's ``exit`` (SIGKILL after ``--failures`` failed probes);
- *ready again*: the restarted lane's ``ready``.

**node loss** (the 3-node Slurm test cluster, skipped with ``--skip-slurm``): six
fake-vllm lanes (25 tokens/s, so requests are in flight), ``on_failure = "continue"``,
``min_ready = "50%"``, and the rehearsal worker sending ``--prompts`` prompts with 12 in
flight and ONE attempt each. Once 40 are answered, the agent on n2 is SIGKILLed. From the
worker's results and the endpoint's time series: requests lost (the worker's errors:
every request here is non-streaming, so none had started its answer), attempts that
were on n2's lanes when it died (failed there, retried elsewhere by the endpoint), and
the time from the SIGKILL to n2's lanes leaving the rotation (their ``failed`` events).

Figures are medians (min–max) of this machine, printed with ``uptime``'s load: compare
only figures of one run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from tests.slurm.cluster import SlurmCluster, wait_until  # noqa: E402 (needs the path above)
from tests.slurm.jobs import DdsupJob, agent_pid, run_processes  # noqa: E402
from tests.slurm.test_long_jobs import _results, _surviving_job  # noqa: E402

LANE = """[unit]
type = "lane"
[service]
exec = ["ddsup", "fake-vllm", "--port", "{{port}}", "--model", "{{model}}"]
restart = "on-failure"
restart_sec = "100ms"
timeout_stop = "5s"
[ready]
http = "http://{{host}}:{{port}}/health"
interval = "100ms"
liveness_interval = "{interval}"
liveness_failures = {failures}
[lane]
model = "m"
gpus = 1
replicas = 2
port = "auto"
stagger = "0s"
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _events(state: Path) -> list[dict[str, Any]]:
    path = state / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def _wait(state: Path, done: Any, limit: float = 60.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:  # another process's file: a bounded poll
        events = _events(state)
        if done(events):
            return events
        time.sleep(0.02)
    raise SystemExit(f"timed out waiting in {state}")


def _readies(events: list[dict[str, Any]], instance: str) -> list[float]:
    return [e["time"] for e in events if e.get("instance") == instance and e.get("to") == "ready"]


def liveness_run(root: Path, interval: str, failures: int, seconds: float) -> dict[str, float]:
    units = root / "units"
    units.mkdir(parents=True)
    (units / "lane@.toml").write_text(LANE.format(interval=interval, failures=failures))
    endpoint = f'[unit]\ntype = "endpoint"\n[endpoint]\nport = {_free_port()}\n'
    (units / "endpoint.toml").write_text(endpoint)
    state = root / "state"
    argv = [sys.executable, "-m", "ddsup", "start", str(units), "--state-dir", str(state)]
    argv += ["--nodes", "1", "--gpus-per-node", "2", "-q"]
    start = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
    try:
        events = _wait(
            state, lambda es: len({*_readies(es, "lane@0"), *_readies(es, "lane@1")}) >= 2
        )
        pid = next(
            e["pid"] for e in events if e["event"] == "process" and e["instance"] == "lane@0"
        )
        time.sleep(random.uniform(0, seconds))
        stopped = time.time()
        os.kill(pid, signal.SIGSTOP)
        events = _wait(
            state, lambda es: len(_readies(es, "lane@0")) >= 2, limit=60 + 4 * seconds * failures
        )
    finally:
        start.send_signal(signal.SIGTERM)
        start.wait(timeout=60)
    lane = [e for e in events if e.get("instance") == "lane@0"]
    out = next(e["time"] for e in lane if e.get("to") == "unresponsive")
    killed = next(e["time"] for e in lane if e["event"] == "exit")
    return {
        "eject": out - stopped,
        "kill": killed - stopped,
        "ready again": _readies(events, "lane@0")[1] - stopped,
    }


def _figure(values: list[float]) -> str:
    return f"{statistics.median(values):6.2f} s  ({min(values):.2f}–{max(values):.2f})"


def liveness(runs: int, interval: str, failures: int) -> None:
    seconds = float(subprocess.run(
        [sys.executable, "-c", f"from ddsup.units._durations import parse_duration as p; print(p({interval!r}))"],
        capture_output=True, text=True, check=True,
    ).stdout)  # fmt: skip
    rows: dict[str, list[float]] = {}
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="ddsup-bench-") as tmp:
            for name, value in liveness_run(Path(tmp), interval, failures, seconds).items():
                rows.setdefault(name, []).append(value)
    print(f"liveness: liveness_interval = {interval}, liveness_failures = {failures}, {runs} runs")
    print(f"  bounds by design: eject <= {2 * seconds:g} s, kill <= {(failures + 1) * seconds:g} s")
    for name, values in rows.items():
        print(f"  SIGSTOP -> {name:12} {_figure(values)}")


def node_loss(prompts: int) -> None:
    with tempfile.TemporaryDirectory(prefix="ddsup-bench-") as tmp:
        cluster = SlurmCluster.start(Path(tmp) / "slurm", nodes=3)
        try:
            job = DdsupJob(Path(tmp) / "run")
            _surviving_job(job, prompts)
            job_id = cluster.sbatch(job.script(), extra_args=["-N3"])
            wait_until(lambda: len(_results(job)) >= 40, 90, lambda: "the worker never got going")
            os.kill(agent_pid(job.invocation_id(), "n2"), signal.SIGKILL)
            killed = time.time()
            result = cluster.wait_job(job_id, timeout=300)
            leftovers = run_processes(job.invocation_id())
            _node_loss_figures(job, prompts, killed, result.state, result.exit_code, leftovers)
        finally:
            cluster.stop()


def _node_loss_figures(
    job: DdsupJob, prompts: int, killed: float, state: str, code: int, leftovers: list[int]
) -> None:
    results = _results(job)
    lost = [r for r in results if r.get("error")]
    n2 = {lane["instance"] for lane in job.lanes() if lane["node"] == "n2"}
    out = [e["time"] for e in job.events() if e.get("instance") in n2 and e.get("to") == "failed"]
    cut = 0
    for path in (job.state / "series").glob("endpoint-*.jsonl"):
        for line in path.read_text().splitlines()[1:]:
            row = json.loads(line)
            for index, lane in enumerate(row.get("lanes", [])):
                if lane in n2 and row["t"] >= killed:
                    cut += row["counts"][6 * index + 2]
    print(f"node loss: 6 lanes on 3 nodes, agent on n2 SIGKILLed after 40 of {prompts} prompts")
    print(f"  job {state} exit {code}; results {len(results)}; requests lost {len(lost)}")
    print(f"  attempts cut on n2's lanes and retried by the endpoint: {cut}")
    print(f"  SIGKILL -> n2's lanes out of the rotation: {max(out) - killed:.3f} s")
    print(f"  processes of the run left afterwards: {len(leftovers)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--interval", default="1s", help="liveness_interval (default 1s)")
    parser.add_argument("--failures", type=int, default=3, help="liveness_failures (default 3)")
    parser.add_argument("--prompts", type=int, default=300, help="node loss: prompts (300)")
    parser.add_argument("--skip-slurm", action="store_true", help="only the liveness part")
    args = parser.parse_args()
    print("load:", os.getloadavg(), "cpus:", os.cpu_count())
    liveness(args.runs, args.interval, args.failures)
    if not args.skip_slurm:
        node_loss(args.prompts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
