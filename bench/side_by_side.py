"""In-process step timings of this checkout beside a baseline revision, alternating.

``plan_cost.py`` and ``lane_table_cost.py`` time steps of ddsup in-process: a program
(Python source) that takes one size as its argument and prints one JSON object, each
step's CPU seconds. Each round runs it once per code, each in a fresh interpreter with
that code first on ``PYTHONPATH``, alternating, so this checkout and ``--baseline REV``
(``scale_allocation.baseline_code``: a ``git archive``, or a directory holding the
source) meet the same machine; the callers print the medians.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from scale_allocation import baseline_code

ROOT = Path(__file__).resolve().parent.parent
Steps = dict[str, float]  # step → CPU seconds
Runs = dict[str, list[Steps]]  # code's name → one Steps per round


def timed(program: str, code: Path, size: int) -> Steps:
    """``program``'s step timings at ``size``, with ``code`` (a ``supervisor`` tree)."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    done = subprocess.run(
        [sys.executable, "-c", program, str(size)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    steps: Steps = json.loads(done.stdout)
    return steps


def alternate(
    program: str, sizes: Iterable[int], rounds: int, baseline: str | None
) -> Iterator[tuple[int, Runs]]:
    """For each size, ``rounds`` rounds of this checkout and then the baseline (if any)."""
    with tempfile.TemporaryDirectory() as scratch:
        codes = {"this checkout": ROOT / "supervisor"}
        if baseline:
            codes[baseline] = baseline_code(baseline, Path(scratch, "base"))
        for size in sizes:
            runs: Runs = {name: [] for name in codes}
            for _ in range(rounds):
                for name, code in codes.items():
                    runs[name].append(timed(program, code, size))
            yield size, runs


def step_medians(runs: Runs) -> Iterator[tuple[str, list[float], str]]:
    """Each step's median CPU seconds per code (this checkout first), and the ratio of
    the first to the second as a cell ("" without a baseline)."""
    names = list(runs)
    for step in runs[names[0]][0]:
        medians = [statistics.median(r[step] for r in runs[name]) for name in names]
        ratio = f"{medians[0] / medians[1]:8.3f}" if len(medians) > 1 and medians[1] else ""
        yield step, medians, ratio
