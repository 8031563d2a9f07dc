"""CPU of the endpoint's lane choice per request as the fleet grows, in one process.

Per proxied request the endpoint chooses a lane (:meth:`LaneTable.choose`, before issue
18/19's index the walk :func:`~ddsup.endpoint._admission.choose` over every lane of the
model), then counts the request in (``begin``) and later out (``end``). This measures
those three, and nothing else of the request path, at ``--lanes`` lanes of one model:

- **request**: choose + begin, then the end of the request begun ``--inflight`` requests
  earlier (so ``--inflight`` requests are always in flight, spread over the lanes by the
  choice itself), on top of a background of 0-2 requests per lane in flight from before;
- with ``--rows 2`` another worker's row of the shared table (a second view of the same
  ``memfd``) begins and ends requests on random lanes between ours, one of each per
  request of ours, untimed: the choice sees its counts change under it;
- **429**: every lane at ``max_queue_per_lane`` (1 here), the choice that finds no room.

Only the calls above are timed (``perf_counter_ns`` around them, summed), so the other
worker's part is not counted. ``--baseline REV`` runs the same in a tree exported from git
revision ``REV`` (``main``), the two trees alternating run by run; medians of ``--runs``.

    .venv/bin/python bench/endpoint_choose.py [--lanes 2,128,1024,8000] [--rows 1,2]
        [--requests 20000] [--runs 5] [--baseline main]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ddsup.endpoint import _admission
from ddsup.endpoint._lanes import LaneTable

try:
    from ddsup.endpoint._lane_state import LaneInfo, LaneState
except ImportError:  # a --baseline tree from before the nineteenth stop keeps them here
    from ddsup.endpoint._lanes import LaneInfo, LaneState  # type: ignore[attr-defined]
from ddsup.endpoint._shared_counts import SharedCounts

Pick = Callable[[float, int], LaneState | None]


def picker(table: LaneTable) -> Pick:
    """The choice as the proxy makes it, in whichever tree this runs."""
    if hasattr(_admission, "Admission"):
        admission = _admission.Admission(table)

        def pick(now: float, limit: int) -> LaneState | None:
            turn = table.next_turn("m")
            return admission.choose("m", (), limit=limit, now=now, stale_after=3.0, turn=turn)

        def resync() -> float:
            """µs of re-reading every lane (each second, and when the lanes change), with
            the choice that follows it rebuilding the name's buckets."""
            table.generation += 1
            start = time.perf_counter_ns()
            pick(time.monotonic(), 64)
            return (time.perf_counter_ns() - start) / 1e3

        pick.resync = resync  # type: ignore[attr-defined]
        return pick

    def walk(now: float, limit: int) -> LaneState | None:
        turn = table.next_turn("m")
        ready = table.ready("m")
        return _admission.choose(ready, (), limit=limit, now=now, stale_after=3.0, turn=turn)

    return walk


def build(lanes: int, rows: int) -> tuple[LaneTable, SharedCounts | None]:
    counts = SharedCounts.private() if rows == 1 else SharedCounts.create(rows, 0)
    infos = (LaneInfo(f"l{i}", "m", f"http://127.0.0.1:{10000 + i}") for i in range(lanes))
    table = LaneTable(infos, counts=counts)
    other = None if rows == 1 else SharedCounts(counts.fd, rows, 1)
    return table, other


def run(lanes: int, rows: int, requests: int, inflight: int, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    table, other = build(lanes, rows)
    pick = picker(table)
    states = list(table.ready("m"))
    for state in states:  # a background load from before
        for _ in range(rng.randrange(3)):
            state.begin()
        if other is not None:
            other.add(state.slot, rng.randrange(3))
    pick(time.monotonic(), 64)  # warm: the first choice builds the index (timed below)
    flying: collections.deque[LaneState] = collections.deque()
    theirs: collections.deque[int] = collections.deque()
    spent = 0
    clock = time.perf_counter_ns
    for _ in range(requests):
        if other is not None:  # the other worker, untimed
            slot = states[rng.randrange(lanes)].slot
            other.add(slot, 1)
            theirs.append(slot)
            if len(theirs) > inflight:
                other.add(theirs.popleft(), -1)
        start = clock()
        lane = pick(time.monotonic(), 64)
        assert lane is not None
        lane.begin()
        flying.append(lane)
        if len(flying) > inflight:
            flying.popleft().end()
        spent += clock() - start
    per_request = spent / requests / 1e3
    for state in states:  # every lane full: the 429 path
        while state.outstanding < 1:
            state.begin()
    pick(time.monotonic(), 1)  # the 1,000s of changes above overran the journal: re-read
    spent = 0
    for _ in range(requests // 4):
        start = clock()
        lane = pick(time.monotonic(), 1)
        spent += clock() - start
        assert lane is None
    figures = {"request": per_request, "429": spent / (requests // 4) / 1e3, "resync": 0.0}
    resync = getattr(pick, "resync", None)
    if resync is not None:
        figures["resync"] = resync() / 1e3  # ms
    return figures


def child(args: argparse.Namespace) -> None:
    figures = run(args.lanes[0], args.rows[0], args.requests, args.inflight, args.seed)
    print(json.dumps(figures))


def export(rev: str, tmp: Path) -> Path:
    """The ``supervisor/`` tree of git revision ``rev`` under ``tmp``."""
    root = Path(__file__).resolve().parent.parent
    archive = subprocess.run(
        ["git", "-C", str(root), "archive", rev, "supervisor"], capture_output=True, check=False
    )
    if archive.returncode:
        raise SystemExit(f"--baseline {rev}: {archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive.stdout, check=True)
    return tmp / "supervisor"


def measure(
    source: Path | None, lanes: int, rows: int, args: argparse.Namespace
) -> dict[str, float]:
    env = dict(os.environ)
    if source is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(source), *filter(None, [env.get("PYTHONPATH")])])
    argv = [sys.executable, __file__, "--child", f"--lanes={lanes}", f"--rows={rows}"]
    argv += [f"--requests={args.requests}", f"--inflight={args.inflight}", f"--seed={args.seed}"]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    figures: dict[str, float] = json.loads(out.stdout)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--lanes", default="2,128,1024,8000", type=lambda s: [int(x) for x in s.split(",")]
    )
    parser.add_argument("--rows", default="1,2", type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--inflight", type=int, default=32)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--baseline", metavar="REV")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    print(
        f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; {args.requests} "
        f"requests, {args.inflight} in flight, medians of {args.runs} runs (µs each)"
    )
    with tempfile.TemporaryDirectory() as tmp:
        trees: list[tuple[str, Path | None]] = [("this tree", None)]
        if args.baseline:
            trees.insert(0, (args.baseline, export(args.baseline, Path(tmp))))
        heads = " ".join(f"{name + ' request':>18} {name + ' 429':>14}" for name, _ in trees)
        tail = "  ratio request / 429" if args.baseline else ""
        print(f"{'lanes':>6} {'rows':>4} {heads}{tail}  re-read all, ms (this tree)")
        for lanes in args.lanes:
            for rows in args.rows:
                print(row(lanes, rows, trees, args), flush=True)
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


def row(
    lanes: int, rows: int, trees: list[tuple[str, Path | None]], args: argparse.Namespace
) -> str:
    got: dict[str, list[dict[str, float]]] = {name: [] for name, _ in trees}
    for _ in range(args.runs):  # alternate the trees run by run
        for name, source in trees:
            got[name].append(measure(source, lanes, rows, args))
    medians = {
        name: {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        for name, runs in got.items()
    }
    line = f"{lanes:>6} {rows:>4} " + " ".join(
        f"{m['request']:>18.2f} {m['429']:>14.2f}" for m in medians.values()
    )
    if args.baseline:
        old, new = medians[trees[0][0]], medians[trees[1][0]]
        line += f"  {old['request'] / new['request']:9.1f}x {old['429'] / new['429']:7.1f}x"
    return line + f"  {medians['this tree']['resync']:12.1f}"


if __name__ == "__main__":
    main()
