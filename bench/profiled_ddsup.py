"""``ddsup`` under cProfile, for ``scale_allocation.py --profile``.

``python -m cProfile -o FILE -m ddsup …`` writes nothing for ``ddsup start``: once its
run is over, ``ddsup start`` ends with ``os._exit`` (``run/_process_end``, skipping the
interpreter's teardown), and cProfile writes its file at that teardown. Here the
profile is written by ``os._exit`` itself, then the process ends as it would have.

The profile's clock is the main thread's CPU time, not the wall clock: at 128 × 8 on
2 CPUs the controller waits for a CPU about as long as it runs, and a wall-clock
profile charges each wait to whatever line was preempted (a socket's ``send`` that
wakes its reader looked like 200 µs).

Usage: ``python bench/profiled_ddsup.py FILE ARG…`` (the arguments of ``ddsup``).
"""

from __future__ import annotations

import cProfile
import os
import sys
import time
from typing import NoReturn

from ddsup._cli import main


def run(out: str, argv: list[str]) -> NoReturn:
    profiler = cProfile.Profile(time.thread_time)
    real_exit = os._exit

    def exit_with_profile(status: int) -> NoReturn:
        profiler.disable()
        profiler.dump_stats(out)
        real_exit(status)

    os._exit = exit_with_profile
    profiler.enable()
    try:
        status = main(argv)
    except SystemExit as ended:  # argparse's --help, --version, a usage error
        status = ended.code if isinstance(ended.code, int) else 1
    exit_with_profile(status)


if __name__ == "__main__":
    run(sys.argv[1], sys.argv[2:])
