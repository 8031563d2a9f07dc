"""The endpoint's lane table as a start's lanes join one at a time, and as a stop's leave.

Once the controller keeps up with its agents, the lane feed brings a start's ready lanes
one or two per message (778-901 messages at 128 × 8), and the endpoint, for each lane
that joins, applies the feed's change, and its name learner wakes, asks the lane's
``/v1/models`` and applies what it lists (``LaneTable.learn_names``). This bench does
exactly that in-process, the ask answered at once instead of over a socket (the lane
lists its own model, as a vLLM lane without adapters does): N lanes of one model join
one at a time, each until its names are learned, then leave one at a time (a stop, the
learner woken by each change), on this checkout and on ``--baseline REV`` side by side (alternating, each in a
fresh interpreter), at 1,024 and 8,000 lanes, and prints the CPU medians and their ratio.

    .venv/bin/python bench/lane_table_cost.py --baseline d62cc43 [--lanes 1024,8000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from side_by_side import Runs, alternate, step_medians

ROOT = Path(__file__).resolve().parent.parent

PROGRAM = """
import json, sys, time
import trio
from ddsup.endpoint import LaneInfo, LaneTable, _lane_names
from ddsup.endpoint._config import EndpointConfig

async def ask(config, lanes, state):  # the lane's /v1/models, answered at once
    lanes.learn_names(state.info, (state.info.model,))

_lane_names._ask = ask

async def main(count):
    lanes = [LaneInfo(f"lane@{i}", "m", f"http://10.{i // 250}.{i % 250}.1:8000") for i in range(count)]
    table = LaneTable(models=["m"])
    steps = {}
    async with trio.open_nursery() as nursery:
        await nursery.start(_lane_names.learn_lane_names, EndpointConfig(), table)
        began = time.process_time()
        for done, lane in enumerate(lanes, 1):
            table.change([lane], [])
            while len(table._learned) < done:  # the learner woke, asked, and learned
                await trio.sleep(0)
        steps["join one at a time, names learned"] = time.process_time() - began
        assert len(table.ready("m")) == count
        began = time.process_time()
        for lane in lanes:
            table.change([], [lane.instance])
            await trio.sleep(0)  # the learner wakes to each change
        steps["leave one at a time"] = time.process_time() - began
        assert table.ready("m") == ()
        nursery.cancel_scope.cancel()
    print(json.dumps(steps))

trio.run(main, int(sys.argv[1]))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--baseline", metavar="REV", help="also time ddsup as of this revision")
    parser.add_argument("--lanes", default="1024,8000", help="fleet sizes")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"load {os.getloadavg()[0]:.1f} at the start")
    counts = (int(n) for n in args.lanes.split(","))
    for count, runs in alternate(PROGRAM, counts, args.rounds, args.baseline):
        report(count, runs)
    print(f"load {os.getloadavg()[0]:.1f} at the end; CPU, medians of {args.rounds}")


def report(count: int, runs: Runs) -> None:
    names = list(runs)
    print(f"\n{count} lanes: CPU ms in all (µs per lane)")
    print(f"  {'step':<36}" + "".join(f"{n[:20]:>24}" for n in names) + "   ratio")
    for step, medians, ratio in step_medians(runs):
        cells = "".join(f"{1e3 * m:12.1f} ({1e6 * m / count:7.1f})" for m in medians)
        print(f"  {step:<36}" + cells + ratio)


if __name__ == "__main__":
    main()
