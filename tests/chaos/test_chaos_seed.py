"""The chaos suite's seed: printed before any schedule runs, settable, new in each CI run,
and the smoke set runs whatever it is.

Each case collects the suite in a pytest of its own, as ``scripts/test`` and CI run it
(from the top of the suite, so ``--chaos-seed`` must exist there too).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from chaos_schedule import SMOKE

ROOT = Path(__file__).resolve().parents[2]


def _collect(*args: str, ci: str | None = None) -> tuple[int, list[str]]:
    """``pytest --collect-only ARGS``: the seed it printed, and the schedule ids."""
    env = {k: v for k, v in os.environ.items() if k not in {"CI", "DDSUP_CHAOS_SEED"}}
    if ci is not None:
        env["CI"] = ci
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    [seed] = re.findall(r"^chaos: seed (\d+) \(", done.stdout, flags=re.M)
    return int(seed), re.findall(r"\[(schedule-\d+-\d+)\]", done.stdout)


@pytest.mark.slow  # collects the whole suite
def test_the_seed_is_set_from_the_top_of_the_suite_and_the_smoke_set_runs_too() -> None:
    seed, ids = _collect("tests", "-k", "schedule", "--chaos-seed", "7", "--chaos-runs", "2")
    assert seed == 7
    smoke = [f"schedule-{s}-{i}" for s, i in SMOKE]
    assert ids[:2] == ["schedule-7-0", "schedule-7-1"]
    assert set(smoke) <= set(ids)


def test_in_ci_each_run_has_a_new_seed_and_the_same_smoke_set() -> None:
    first, first_ids = _collect("tests/chaos", "--chaos-runs", "1", ci="true")
    second, second_ids = _collect("tests/chaos", "--chaos-runs", "1", ci="true")
    assert first != second  # one chance in a million of the same seed twice
    assert first_ids[0] == f"schedule-{first}-0"
    assert first_ids[1:] == second_ids[1:]
