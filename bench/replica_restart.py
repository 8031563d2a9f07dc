"""How long a two-node replica takes to restart whole, and a never-ready lane to end 75.

Run: ``.venv/bin/python bench/replica_restart.py [--restarts 5] [--slurm] [--never-ready]``

- **Replica restart, locally** (``--nodes 2 --gpus-per-node 1``) and, with ``--slurm``,
  on a private 3-node Slurm cluster (three ``slurmd`` on this host, see
  docs/testing-slurm.md; needs root): a lane over two nodes whose ranks are tiny Python
  HTTP programs (ready in ~0.1 s). Each round ends the follower (exit 1) and times, from
  ``events.jsonl``: the follower's ``exit`` event → every rank held (the other taken
  down) → rank 0 ``starting`` (after the backoff: ``restart_sec`` = 100 ms, the default,
  ±10 % jitter; ``restart_max_sec`` is set to 100 ms too, so that the rounds, which
  follow each other within seconds, do not double it) → the follower ``starting`` (on
  rank 0's port) → rank 0 ``ready``: the replica serves again. Defaults everywhere else
  (``timeout_stop`` 30 s is not reached: the ranks exit on SIGTERM).
- **Never ready** (``--never-ready``): a fake-vllm lane with ``--fail-health``,
  ``restart = "on-failure"`` and every other key at its default (``timeout_start`` 90 s,
  ``start_limit_burst`` 5): the time from ``run starting`` to ``run finished``
  (exit 75), and the attempts. About 7.5 minutes. Then the same with ``timeout_start =
  "4s"`` (the issue's lane).

Figures are printed, one line each, as measured on this machine; nothing is scaled.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # tests.slurm and its `support` imports

from tests.slurm.cluster import SlurmCluster, wait_until  # noqa: E402 (needs the path above)
from tests.slurm.jobs import DdsupJob  # noqa: E402

PY = sys.executable
RANK_PY = """\
import http.server, os, sys, threading, time
state = os.environ["DDSUP_STATE_DIR"]
instance = os.environ["DDSUP_INSTANCE"]


class Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


if os.environ["DDSUP_LANE_RANK"] == "0":
    server = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Ok)
    threading.Thread(target=server.serve_forever, daemon=True).start()
trigger = os.path.join(state, f"end-{instance}")
while not os.path.exists(trigger):
    time.sleep(0.01)
os.rename(trigger, f"{trigger}.{os.getpid()}")
sys.exit(1)
"""


def replica_units(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "rank.py").write_text(RANK_PY)
    argv = json.dumps([PY, str(directory / "rank.py"), "{port}"])
    (directory / "lane@.toml").write_text(
        f'[unit]\ntype = "lane"\n[service]\nexec = {argv}\nrestart = "on-failure"\n'
        'restart_max_sec = "100ms"\nstart_limit_burst = 1000\nstart_limit_interval = "1s"\n'
        '[ready]\nhttp = "http://{host}:{port}/health"\ninterval = "50ms"\n'
        '[lane]\nmodel = "m"\ngpus = 1\nnodes = 2\nreplicas = 1\nport = "auto"\n'
    )
    return directory


def events(state: Path) -> list[dict[str, Any]]:
    path = state / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def _at(
    found: list[dict[str, Any]], instance: str, kind: str, to: str | None = None
) -> list[float]:
    return [
        e["time"]
        for e in found
        if e.get("instance") == instance and e["event"] == kind and (to is None or e["to"] == to)
    ]


def _until_ready(state: Path, times: int, alive: Callable[[], None]) -> None:
    """Until rank 0 has been ready ``times`` times (the file is all there is to watch)."""
    wait_until(
        lambda: len(_at(events(state), "lane@0", "unit", "ready")) >= times,
        60,
        lambda: f"rank 0 not ready {times} times",
        alive=alive,
    )


def rounds(state: Path, count: int, alive: Callable[[], None]) -> list[dict[str, float]]:
    """End the follower ``count`` times; each restart's phases (seconds)."""
    out = []
    for n in range(count):
        _until_ready(state, n + 1, alive)
        (state / "end-lane@0:1").touch()
        _until_ready(state, n + 2, alive)
        found = events(state)
        ended = _at(found, "lane@0:1", "exit")[-1]
        held = max(_at(found, i, "unit", "restarting")[-1] for i in ("lane@0", "lane@0:1"))
        head = _at(found, "lane@0", "unit", "starting")[-1]
        follower = _at(found, "lane@0:1", "unit", "starting")[-1]
        ready = _at(found, "lane@0", "unit", "ready")[-1]
        out.append(
            {
                "total": ready - ended,
                "held": held - ended,
                "rank 0 starting": head - held,
                "follower starting": follower - head,
                "ready": ready - head,
            }
        )
    return out


def report(where: str, measured: list[dict[str, float]]) -> None:
    for key in measured[0]:
        values = [m[key] for m in measured]
        print(
            f"{where}: {key:18s} median {statistics.median(values):.3f} s "
            f"(min {min(values):.3f}, max {max(values):.3f}, n={len(values)})"
        )


def local(count: int, scratch: Path) -> None:
    units = replica_units(scratch / "local-units")
    state = scratch / "local-state"
    argv = [PY, "-m", "ddsup", "start", str(units), "--nodes", "2", "--gpus-per-node", "1"]
    with (scratch / "local.out").open("wb") as out:
        process = subprocess.Popen([*argv, "--state-dir", str(state)], stdout=out, stderr=out)

    def alive() -> None:
        if process.poll() is not None:
            raise RuntimeError(f"ddsup start ended early: {process.returncode}")

    try:
        report("local", rounds(state, count, alive))
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)


def slurm(count: int, scratch: Path) -> None:
    cluster = SlurmCluster.start(scratch / "cluster", nodes=3)
    try:
        job = DdsupJob(scratch / "slurm-run")
        replica_units(job.units)
        job_id = job.submit(cluster)

        def alive() -> None:
            state = cluster.job_info(job_id).get("JobState")
            if state not in ("PENDING", "RUNNING"):
                raise RuntimeError(f"job {job_id} is {state}:\n{cluster.job_output(job_id)}")

        report("slurm", rounds(job.state, count, alive))
        cluster.run(["scancel", job_id])
        cluster.wait_job(job_id, timeout=60)
    finally:
        cluster.stop()


def never_ready(scratch: Path, timeout_start: str | None) -> None:
    units = scratch / f"never-{timeout_start or 'default'}"
    units.mkdir(parents=True)
    argv = json.dumps([PY, "-m", "ddsup", "fake-vllm", "--port", "{port}", "--fail-health"])
    extra = f'timeout_start = "{timeout_start}"\n' if timeout_start else ""
    (units / "lane@.toml").write_text(
        f'[unit]\ntype = "lane"\n[service]\nexec = {argv}\nrestart = "on-failure"\n{extra}'
        '[ready]\nhttp = "http://{host}:{port}/health"\n'
        '[lane]\nmodel = "m"\nreplicas = 1\nport = "auto"\n'
    )
    state = units / "state"
    began = time.monotonic()
    done = subprocess.run(
        [PY, "-m", "ddsup", "start", str(units), "--gpus-per-node", "1", "--state-dir", str(state)],
        capture_output=True,
        check=False,
    )
    wall = time.monotonic() - began
    found = events(state)
    run = {e["reason"]: e["time"] for e in found if e["event"] == "run"}
    attempts = len(_at(found, "lane@0", "unit", "starting"))
    label = f"timeout_start = {timeout_start or '90s (default)'}"
    print(
        f"never ready, {label}: exit {done.returncode} after "
        f"{run['finished'] - run['starting']:.1f} s (run starting → finished; "
        f"{wall:.1f} s wall), {attempts} attempts"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--restarts", type=int, default=5)
    parser.add_argument("--slurm", action="store_true", help="also on a private Slurm cluster")
    parser.add_argument("--never-ready", action="store_true", help="the 75 figures (~8 min)")
    args = parser.parse_args()
    os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    with tempfile.TemporaryDirectory(prefix="replica-bench-") as tmp:
        scratch = Path(tmp)
        local(args.restarts, scratch)
        if args.slurm:
            slurm(args.restarts, scratch)
        if args.never_ready:
            never_ready(scratch, "4s")
            never_ready(scratch, None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
