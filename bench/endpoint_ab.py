"""This tree's endpoint against another revision's, alternating, in one run: a quick A/B.

``endpoint_compare.py`` runs every variant (nginx, the floors, 1 and 2 workers, plain and
SSE) and takes about ten minutes; a change's effect on one path is found faster, and with
more repetitions, by running only the two endpoints (one worker each) and the bare trio
proxy floor (``proxy_floors.py``: what the endpoint's design costs before its features),
alternating, in front of the same lanes, with the same pinning as there (the proxies on
the first core, wrk and the lanes on the others). Prints, per variant, the median CPU per
request (user + system of the serving process) with every repetition's figure, req/s and
the share of its core, then the ratio of this tree to the baseline.

    .venv/bin/python bench/endpoint_ab.py --baseline main [--reps 6] [--seconds 4] [--sse]

Needs wrk (``apt-get install -y wrk``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import psutil
from endpoint_compare import (
    PLAIN,
    STREAM,
    Child,
    Variant,
    endpoint,
    export_baseline,
    measure,
    rotations,
    start,
)
from endpoint_proxy import stop_all, wait_port


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--baseline", required=True, metavar="REV", help="a git revision")
    parser.add_argument("--reps", type=int, default=6, help="alternating repetitions")
    parser.add_argument("--seconds", type=float, default=4, help="wrk time per repetition")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--sse", action="store_true", help="SSE requests instead of plain")
    parser.add_argument("--events", type=int, default=20, help="SSE events per request")
    parser.add_argument("--gap", type=float, default=0.002, help="seconds between SSE events")
    args = parser.parse_args()
    if not shutil.which("wrk"):
        raise SystemExit("wrk is needed: apt-get install -y wrk")
    cpus = sorted(os.sched_getaffinity(0))
    proxy, load = {cpus[0]}, set(cpus[1:]) or {cpus[0]}
    compare = [sys.executable, str(Path(__file__).with_name("endpoint_compare.py"))]
    body = STREAM if args.sse else PLAIN
    tmp = Path(tempfile.mkdtemp(prefix="ddsup-ab-"))
    children: list[Child] = []
    try:
        lanes = []
        for i in range(2):
            argv = [*compare, "--upstream", str(tmp / f"up{i}"), "--events", str(args.events)]
            children.append(start([*argv, "--gap", str(args.gap)], load))
            lanes.append(f"http://127.0.0.1:{wait_port(tmp / f'up{i}')}")
        mine, mine_url = endpoint(lanes, 1, proxy)
        theirs, theirs_url = endpoint(lanes, 1, proxy, source=export_baseline(args.baseline, tmp))
        floor = start([*compare, "--floor-proxy", "tasks", str(tmp / "floor"), *lanes], proxy)
        children += [mine, theirs, floor]
        variants = [
            Variant("endpoint", mine_url, frozenset(proxy), (psutil.Process(mine.pid),)),
            Variant(args.baseline, theirs_url, frozenset(proxy), (psutil.Process(theirs.pid),)),
            Variant(
                "floor proxy tasks",
                f"http://127.0.0.1:{wait_port(tmp / 'floor')}",
                frozenset(proxy),
                (psutil.Process(floor.pid),),
            ),
        ]
        for v in variants:  # warm-up: pools, caches, page faults
            measure(v, body, 1, args.connections, load)
        samples: dict[str, list[tuple[float, float, float]]] = {v.name: [] for v in variants}
        for order in rotations(variants, args.reps):
            for v in order:
                s = measure(v, body, args.seconds, args.connections, load)
                samples[v.name].append((s.cpu_us, s.rps, s.cpu_s / s.seconds))
    finally:
        stop_all(children)
        shutil.rmtree(tmp, ignore_errors=True)
    kind = f"SSE ({args.events} events)" if args.sse else "plain"
    print(f"{kind}, wrk -c {args.connections} -d {args.seconds:g}s × {args.reps} alternating")
    print(f"load average {os.getloadavg()[0]:.2f} at the end of the run")
    medians = {}
    for name, ss in samples.items():
        medians[name] = statistics.median(cpu for cpu, _, _ in ss)
        every = " ".join(f"{cpu:.1f}" for cpu, _, _ in ss)
        print(
            f"  {name:<18} CPU µs/req median {medians[name]:7.1f}  ({every});  "
            f"req/s {statistics.median(r for _, r, _ in ss):.0f}, "
            f"share {100 * statistics.median(sh for _, _, sh in ss):.0f} %"
        )
    print(f"  endpoint / {args.baseline}: x {medians['endpoint'] / medians[args.baseline]:.2f}")


if __name__ == "__main__":
    main()
