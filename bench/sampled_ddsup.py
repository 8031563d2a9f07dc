"""``ddsup`` under a CPU-time stack sampler, for ``scale_allocation.py --sample``.

cProfile (``profiled_ddsup.py``) times every call, which makes a path of many small calls
(trio's cancel scopes, a decode's field checks) look several times dearer than it is. This
samples instead: ``ITIMER_PROF`` sends ``SIGPROF`` each time the process has used another
``PERIOD`` of CPU (the kernel rounds it to its tick, 4 ms here), and the handler notes the
main thread's Python stack and when. Samples are proportional to the CPU each line used,
never to time spent waiting for a CPU (py-spy's wall-clock samples charge a preemption
to the line that was running: a socket's ``send`` that wakes its reader). The samples are
written from ``os._exit``, where ``ddsup start`` ends; its forked children have no timer.

    python bench/sampled_ddsup.py run FILE ARG…      # the arguments of ddsup
    python bench/sampled_ddsup.py fold FILE [--from S] [--to S] [--top N]

``fold`` prints, for the samples from ``--from`` to ``--to`` seconds after the start, each
function's share of them with what it called (inclusive), then the lines that used the
CPU themselves.
"""

from __future__ import annotations

import argparse
import collections
import os
import signal
import time
from pathlib import Path
from types import FrameType
from typing import NoReturn

PERIOD = 0.001  # seconds of CPU between samples, asked for (the kernel's tick bounds it)


def _stack(frame: FrameType | None) -> str:
    names = []
    while frame is not None:
        code = frame.f_code
        names.append(f"{code.co_name} ({Path(code.co_filename).name}:{frame.f_lineno})")
        frame = frame.f_back
    return ";".join(reversed(names))


def run(out: str, argv: list[str]) -> NoReturn:
    from ddsup._cli import main

    began = time.monotonic()
    me = os.getpid()
    samples: list[tuple[float, str]] = []

    def sample(_signum: int, frame: FrameType | None) -> None:
        samples.append((time.monotonic() - began, _stack(frame)))

    real_exit = os._exit

    def exit_with_samples(status: int) -> NoReturn:
        signal.setitimer(signal.ITIMER_PROF, 0, 0)
        if os.getpid() == me:
            Path(out).write_text("".join(f"{at:.4f}\t{stack}\n" for at, stack in samples))
        real_exit(status)

    os._exit = exit_with_samples
    signal.signal(signal.SIGPROF, sample)
    signal.setitimer(signal.ITIMER_PROF, PERIOD, PERIOD)
    try:
        status = main(argv)
    except SystemExit as ended:  # argparse's --help, --version, a usage error
        status = ended.code if isinstance(ended.code, int) else 1
    exit_with_samples(status)


def fold(path: Path, start: float, end: float, top: int) -> None:
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    count = 0
    for line in path.read_text().splitlines():
        at, _tab, stack = line.partition("\t")
        if not start <= float(at) < end:
            continue
        count += 1
        frames = stack.split(";")
        # a function counts once per sample, however deep it recurses
        inclusive.update({frame.rpartition(":")[0] + ")" for frame in frames})
        own[frames[-1]] += 1
    print(f"{count} samples from {start:g} s to {end:g} s")
    for title, counter in (("with what it called", inclusive), ("itself", own)):
        print(f"--- {title}")
        for name, n in counter.most_common(top):
            print(f"{n:6d} {100 * n / max(count, 1):5.1f} %  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    ran = commands.add_parser("run", help="run ddsup with ARG…, its samples to FILE")
    ran.add_argument("file")
    ran.add_argument("args", nargs=argparse.REMAINDER)
    folded = commands.add_parser("fold", help="each function's share of FILE's samples")
    folded.add_argument("file", type=Path)
    folded.add_argument("--from", dest="start", type=float, default=0.0)
    folded.add_argument("--to", dest="end", type=float, default=float("inf"))
    folded.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    if args.command == "run":
        run(args.file, args.args)
    fold(args.file, args.start, args.end, args.top)


if __name__ == "__main__":
    main()
