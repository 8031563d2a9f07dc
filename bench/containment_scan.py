"""Cost of the registry's scan: CPU per look at the units' trees, with and without a cgroup.

    .venv/bin/python bench/containment_scan.py [--units 8] [--others 500] [--scans 50]

A supervisor (this process, made a subreaper and, where the node allows, moved into a
cgroup) runs ``--units`` units of 4 processes each (``sh`` with three children, like an
API server with an engine and workers), on a node where ``--others`` unrelated processes
also run. It then times ``Containment.scan()`` (CPU time of this process, all threads)
for each cgroup mode: ``v2`` reads the units' ``cgroup.procs`` files, ``off`` reads every
process's ``/proc/PID/stat`` (the scan is proportional to the node's processes). At one
scan every ``SCAN_INTERVAL`` seconds while units run, the last column is the share of
one core the registry costs.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
import tempfile
import time
import uuid

import trio

from ddsup.process import open_containment, spawn
from ddsup.process._containment import SCAN_INTERVAL

UNIT = ["sh", "-c", "sleep 600 & sleep 600 & sleep 600 & exec sleep 600"]


async def measure(mode: str, units: int, scans: int, workdir: str) -> tuple[float, str, int]:
    """CPU seconds per scan, the layers line, and the registry's entries."""
    invocation = uuid.uuid4().hex
    env = {**os.environ, "DDSUP_INVOCATION_ID": invocation}
    async with open_containment(
        invocation, state_dir=workdir, name=f"bench-{mode}", root=True, cgroup=mode
    ) as containment:
        log = pathlib.Path(workdir, f"{mode}.log")
        children = [
            await spawn(UNIT, env=env, cwd="/", log_path=log, unit=f"u{i}") for i in range(units)
        ]
        await trio.sleep(0.5)  # every unit has forked its children
        await containment.scan()  # the first look records everything: not the steady state
        began = time.process_time()
        for _ in range(scans):
            await containment.scan()
        cpu = (time.process_time() - began) / scans
        for child in children:
            await child.stop(15, 1.0)
        assert containment.layers is not None
        summary = containment.layers.summary()
    records = trio.Path(workdir, "containment", f"bench-{mode}.pids")
    return cpu, summary, len((await records.read_text()).splitlines())


async def main(args: argparse.Namespace) -> None:
    processes = len([p for p in os.listdir("/proc") if p.isdigit()])
    print(
        f"{args.units} units × 4 processes, {processes} processes on the node, "
        f"{args.scans} scans each, one scan every {SCAN_INTERVAL:g}s while units run"
    )
    print(f"{'mode':<6} {'CPU/scan':>10} {'core share':>11}  entries  layers")
    for mode in ("v2", "off"):
        with tempfile.TemporaryDirectory() as workdir:
            cpu, summary, entries = await measure(mode, args.units, args.scans, workdir)
        share = cpu / SCAN_INTERVAL * 100
        print(f"{mode:<6} {cpu * 1e3:>8.2f}ms {share:>10.3f}%  {entries:>7}  {summary}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=8)
    parser.add_argument("--others", type=int, default=500)
    parser.add_argument("--scans", type=int, default=50)
    arguments = parser.parse_args()
    others = [subprocess.Popen(["sleep", "600"]) for _ in range(arguments.others)]
    try:
        trio.run(main, arguments)
    finally:
        for other in others:
            other.kill()
            other.wait()
    sys.exit(0)
