"""CPU of starting one unit process in its own cgroup: this checkout against a revision,
alternating, side by side.

    .venv/bin/python bench/spawn_cost.py [--spawns 300] [--rounds 5] [--baseline REV]

A start of 1,024 lanes is 1,024 of these on the lanes' agents, so the cost per spawn is a
share of the 128 × 8 start overhead (``bench/scale_allocation.py``). Each variant runs in
a process of its own (as an agent is: a supervisor that imported the agent's modules and
opened its containment, as root, with a writable cgroup): it spawns ``--spawns`` units,
each ``/bin/true`` in a cgroup of its own, waits for each to exit and ends it, and
reports per spawn the CPU of the ``spawn`` call in the supervisor, the CPU of the child
until it exited (``RUSAGE_CHILDREN``: with a ``preexec_fn`` the child runs Python and
copies pages before its exec), and the wall time of the call.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

from scale_allocation import baseline_code

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

PROGRAM = """
import json, os, resource, sys, time
import trio
import ddsup.run._agent  # an agent's modules: the size of the process that forks
from ddsup.process import open_containment, spawn

def cpu(who):
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime

async def main(invocation, spawns, log):
    env = {"PATH": os.environ["PATH"], "DDSUP_INVOCATION_ID": invocation}
    calls, children, walls = 0.0, 0.0, 0.0
    async with open_containment(
        invocation, state_dir=None, name="agent-node0", root=True, cgroup="auto"
    ) as box:
        kind = (box.layers.to_json()["cgroup"] or {}).get("kind")
        for number in range(spawns):
            children_before = cpu(resource.RUSAGE_CHILDREN)
            wall, before = time.perf_counter(), time.process_time()
            child = await spawn(["/bin/true"], env=env, cwd="/", log_path=log, unit=f"u{number}")
            calls += time.process_time() - before
            walls += time.perf_counter() - wall
            await child.wait()
            await child.stop(15, 1.0)
            children += cpu(resource.RUSAGE_CHILDREN) - children_before
    print(json.dumps({"call": calls / spawns, "child": children / spawns,
                      "wall": walls / spawns, "cgroup": kind}))

trio.run(main, sys.argv[1], int(sys.argv[2]), sys.argv[3])
"""


def one_round(code: Path, spawns: int, log: Path) -> dict[str, float | str]:
    env = {**os.environ, "PYTHONPATH": str(code)}
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, f"bench-{uuid.uuid4().hex}", str(spawns), str(log)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise SystemExit(f"the {code} variant failed:\n{done.stderr}")
    result: dict[str, float | str] = json.loads(done.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spawns", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--baseline", help="a git revision to put beside this checkout")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        codes = {"this checkout": ROOT / "supervisor"}
        if args.baseline:
            codes[args.baseline] = baseline_code(args.baseline, Path(scratch, "base"))
        results: dict[str, list[dict[str, float | str]]] = {name: [] for name in codes}
        for _ in range(args.rounds):
            for name, code in codes.items():
                results[name].append(one_round(code, args.spawns, Path(scratch, "unit.log")))
    load = os.getloadavg()[0]
    print(f"{args.spawns} spawns × {args.rounds} rounds, alternating; load {load:.1f} at the end")
    print(
        f"{'variant':<16} {'cgroup':<12} {'call ms':>8} {'child ms':>9} {'sum ms':>7} {'wall ms':>8}"
    )
    for name, rounds in results.items():

        def median(key: str, rounds: list[dict[str, float | str]] = rounds) -> float:
            return statistics.median(float(r[key]) for r in rounds) * 1e3

        total = statistics.median(float(r["call"]) + float(r["child"]) for r in rounds) * 1e3
        print(
            f"{name:<16} {rounds[0]['cgroup']!s:<12} {median('call'):8.3f}"
            f" {median('child'):9.3f} {total:7.3f} {median('wall'):8.3f}"
        )


if __name__ == "__main__":
    main()
