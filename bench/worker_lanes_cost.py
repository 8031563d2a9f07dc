"""What a start's lanes joining one by one cost the endpoint's workers' link (``workers > 1``).

The endpoint's parent keeps the lane table and passes every change on to each worker,
which keeps a copy. It used to send the whole table at every change (``link.Lanes``),
which each worker decoded and applied whole: O(lanes) per change per worker, quadratic
in a start. It now sends the whole table once and then what a change touched
(``link.LanesChanged``). This bench times both in-process, in this checkout (the whole
table is still what the parent sends first, so forcing it at every change is the old
protocol): N lanes join the parent's table one at a time, every message encoded and
decoded as on the link and applied to one worker's table; CPU of the parent's sends and
of the worker's applying, each variant in a fresh interpreter, alternating.

    .venv/bin/python bench/worker_lanes_cost.py [--lanes 1024,4000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PROGRAM = """
import json, sys, time
from ddsup.endpoint import LaneInfo, LaneTable
from ddsup.endpoint import _worker_link as link
from ddsup.endpoint._config import EndpointConfig
from ddsup.endpoint._worker import apply_lanes
from ddsup.endpoint._workers import WorkerPool

count, whole = int(sys.argv[1]), sys.argv[2] == "whole"
parent, worker = LaneTable(models=["m"]), LaneTable()
pool = WorkerPool(EndpointConfig(), parent, 2, paced_gc=False)
spent = {"parent: encode the messages": 0.0, "worker: decode and apply them": 0.0}

def broadcast(message):
    began = time.process_time()
    line = json.dumps(link.encode(message))
    spent["parent: encode the messages"] += time.process_time() - began
    began = time.process_time()
    apply_lanes(worker, link.decode(json.loads(line)))
    spent["worker: decode and apply them"] += time.process_time() - began

pool._broadcast = broadcast
with parent.watch_changes() as touched:
    pool._touched = touched
    parent.on_change = pool._lanes_changed
    pool._lanes_changed()
    began = time.process_time()
    for i in range(count):
        if whole:
            pool._sent = None  # the old protocol: the whole table at every change
        parent.add(LaneInfo(f"lane@{i}", "m", f"http://10.{i // 250}.{i % 250}.1:8000"))
    spent["in all (the parent's table too)"] = time.process_time() - began
assert len(worker.ready("m")) == count
print(json.dumps(spent))
"""


def timed(count: int, variant: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "supervisor")}
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(count), variant],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=1200,
    )
    steps: dict[str, float] = json.loads(done.stdout)
    return steps


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--lanes", default="1024,4000", help="fleet sizes")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"load {os.getloadavg()[0]:.1f} at the start")
    variants = ("changes", "whole")
    for count in (int(n) for n in args.lanes.split(",")):
        runs: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
        for _ in range(args.rounds):
            for variant in variants:
                runs[variant].append(timed(count, variant))
        print(f"\n{count} lanes joining one at a time, one worker: CPU ms (µs per lane)")
        print(f"  {'':<36}{'changes':>22}{'whole table':>22}   ratio")
        for step in runs[variants[0]][0]:
            medians = [statistics.median(r[step] for r in runs[v]) for v in variants]
            cells = "".join(f"{1e3 * m:11.1f} ({1e6 * m / count:7.1f})" for m in medians)
            print(f"  {step:<36}{cells}{medians[0] / medians[1]:8.3f}")
    print(f"load {os.getloadavg()[0]:.1f} at the end; CPU, medians of {args.rounds}")


if __name__ == "__main__":
    main()
