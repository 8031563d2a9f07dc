"""What ``ddsup start``'s event loop was doing while a lane's ready was late.

Two commands, beside ``scale_allocation.py --readies FILE``:

- ``sample OUT SECONDS``: finds ``ddsup start`` (waiting for it to appear) and every
  ~4 ms writes one JSON line about its main thread, the event loop: the time, its state
  letter (``R`` running or runnable, ``S`` asleep in ``epoll``, ``D`` waiting in the
  kernel), its CPU time and run-queue wait so far (``/proc/PID/schedstat``, ns), and,
  in ``D``, its kernel stack and system call (``/proc/PID/{stack,syscall}``, root only).
- ``late READIES SAMPLES [--over MS]``: for each lane whose ready reached the table more
  than ``--over`` ms after its agent stamped it, how long after the first lane it became
  ready, its two hops, and what the loop did in that window: CPU, run-queue wait, the
  state letters sampled.

Everything is read from ``/proc``, not from ddsup: the oracle does not share the code
under test. The sampler is a process too; on a saturated machine it gets its share
like the rest, and a window with no sample says so. The sixteenth stop found with it
that the start's late lanes wait for the loop's turn on a CPU, not for a lock
(BENCHMARKS.md, "The start's first wave").

    .venv/bin/python bench/loop_sampler.py sample /tmp/loop.jsonl 20 &
    .venv/bin/python bench/scale_allocation.py --stagger 250ms --cool 0 --readies /tmp/r.jsonl
    .venv/bin/python bench/loop_sampler.py late /tmp/r.jsonl /tmp/loop.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

INTERVAL = 0.004


def find_controller(deadline: float) -> int | None:
    """The PID of ``ddsup start`` (not the bench that runs it), once it exists."""
    while time.monotonic() < deadline:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"start" in argv and any(a.endswith(b"ddsup") for a in argv[:4]):
                return int(entry)
        time.sleep(0.02)
    return None


def sample_once(pid: int) -> list[Any] | None:
    """[state, cpu ns, run-queue wait ns, kernel stack and system call when in D]."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        cpu, waited = Path(f"/proc/{pid}/schedstat").read_text().split()[:2]
        where: list[str] = []
        if state == "D":
            syscall = Path(f"/proc/{pid}/syscall").read_text().split()[:1]  # its number
            where = Path(f"/proc/{pid}/stack").read_text().splitlines()[:6] + syscall
        return [state, int(cpu), int(waited), where]
    except (OSError, IndexError, ValueError):
        return None


def sample(out: Path, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    pid = find_controller(deadline)
    if pid is None:
        raise SystemExit("loop_sampler: no `ddsup start` appeared")
    with out.open("w") as lines:
        while time.monotonic() < deadline and (found := sample_once(pid)) is not None:
            lines.write(json.dumps([time.time(), *found]) + "\n")
            time.sleep(INTERVAL)


def window(samples: list[list[Any]], start: float, end: float) -> str:
    """What the loop did from ``start`` to ``end`` (wall-clock seconds)."""
    inside = [s for s in samples if start <= s[0] <= end]
    if len(inside) < 2:
        return "no sample in the window (the sampler did not get a CPU either)"
    first, last = inside[0], inside[-1]
    cpu = (last[2] - first[2]) / 1e6
    waited = (last[3] - first[3]) / 1e6
    states = dict(Counter(str(s[1]) for s in inside))
    span = (last[0] - first[0]) * 1e3
    return f"loop over {span:.0f} ms: cpu {cpu:.0f} ms, waiting for a cpu {waited:.0f} ms, {states}"


def late(readies: Path, samples_path: Path, over_ms: float) -> None:
    rows = [json.loads(line) for line in readies.read_text().splitlines()]
    lanes = [r for r in rows if str(r[1]).startswith("lane@") and r[4] is not None]
    samples = [json.loads(line) for line in samples_path.read_text().splitlines()]
    first = min(r[2] for r in lanes)
    slow = sorted((r for r in lanes if (r[4] - r[2]) * 1e3 > over_ms), key=lambda r: r[2])
    print(f"{len(lanes)} lanes ready, {len(slow)} in the table more than {over_ms:g} ms later")
    for _variant, lane, stamped, line_seen, in_table in slow:
        print(
            f"  {lane} +{stamped - first:.3f} s: line {1e3 * (line_seen - stamped):.0f} ms,"
            f" table {1e3 * (in_table - stamped):.0f} ms;"
            f" {window(samples, stamped, in_table)}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    sampling = commands.add_parser("sample", help="sample ddsup start's loop")
    sampling.add_argument("out", type=Path)
    sampling.add_argument("seconds", type=float)
    looking = commands.add_parser("late", help="the loop in each late lane's window")
    looking.add_argument("readies", type=Path, help="scale_allocation.py --readies output")
    looking.add_argument("samples", type=Path, help="this script's sample output")
    looking.add_argument("--over", type=float, default=100.0, help="ms (default 100)")
    args = parser.parse_args()
    if args.command == "sample":
        sample(args.out, args.seconds)
    else:
        late(args.readies, args.samples, args.over)


if __name__ == "__main__":
    main()
