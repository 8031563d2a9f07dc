"""Options and figures of the chaos suite.

``pytest tests/chaos --chaos-runs N --chaos-seed S`` runs schedules ``schedule-S-0`` …
``schedule-S-(N-1)``; each is reproducible from its id alone (``--chaos-seed S
--chaos-only I``, or ``DDSUP_CHAOS_SEED=S`` and ``-k schedule-S-I``). Whatever the seed,
the smoke set (``chaos_schedule.SMOKE``: the same schedules every run) and the
schedules that once found a bug (``chaos_known_bugs.REGRESSIONS``) run too. The session
ends with one figure line::

    chaos: seed S, schedules run N, orphans found X, wrong exit codes Y, wrong statuses W,
    hangs Z, injections not fired M

where the counts are of schedules (a schedule with two orphans counts once).

The seed is ``--chaos-seed``, else ``$DDSUP_CHAOS_SEED``, else, in CI (``CI=true``), a
new one every run, else 1; it is printed when the schedules are collected, and in the
figure line. The options are the root conftest's, so that they exist whatever pytest is
pointed at (``scripts/test --chaos-seed S`` too).
"""

from __future__ import annotations

import os
import secrets

import pytest
from chaos_harness import Figures
from chaos_known_bugs import REGRESSIONS, known_bug
from chaos_schedule import SMOKE, Schedule, make_schedule

from support.ci import in_ci

DEFAULT_RUNS = 50
DEFAULT_SEED = 1


FIGURES = pytest.StashKey[Figures]()
SEED = pytest.StashKey[int]()
ROTATED = pytest.StashKey[bool]()


def _runs(config: pytest.Config) -> int:
    runs: int | None = config.getoption("chaos_runs")
    return int(os.environ.get("DDSUP_CHAOS_RUNS", DEFAULT_RUNS)) if runs is None else runs


def _seed(config: pytest.Config) -> int:
    """The session's seed (see the module docstring), chosen once."""
    if SEED in config.stash:
        return config.stash[SEED]
    seed: int | None = config.getoption("chaos_seed")
    rotated = False
    if seed is None and os.environ.get("DDSUP_CHAOS_SEED"):
        seed = int(os.environ["DDSUP_CHAOS_SEED"])
    if seed is None and in_ci():
        seed, rotated = secrets.randbelow(1_000_000), True
    config.stash[SEED] = seed = DEFAULT_SEED if seed is None else seed
    config.stash[ROTATED] = rotated
    return seed


def pytest_report_collectionfinish(config: pytest.Config) -> list[str]:
    """The seed, before any schedule runs: a failing one is reproducible from it."""
    if SEED not in config.stash:
        return []
    seed = config.stash[SEED]
    how = "new for this CI run" if config.stash[ROTATED] else "fixed"
    return [
        f"chaos: seed {seed} ({how}); reproduce schedule I with "
        f"pytest tests/chaos --chaos-seed {seed} --chaos-only I"
    ]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "schedule" not in metafunc.fixturenames:
        return
    config = metafunc.config
    seed = _seed(config)
    only: list[int] | None = config.getoption("chaos_only")
    indices = list(only) if only else list(range(_runs(config)))
    schedules = [make_schedule(seed, i) for i in indices]
    if not only:  # the smoke set and regressions, whatever the seed (unless it covers them)
        covered = {(seed, i) for i in indices}
        always = dict.fromkeys((*SMOKE, *REGRESSIONS))
        schedules += [make_schedule(s, i) for s, i in always if (s, i) not in covered]
    params = [pytest.param(s, id=s.test_id, marks=_marks(s)) for s in schedules]
    metafunc.parametrize("schedule", params)


def _marks(schedule: Schedule) -> list[pytest.MarkDecorator]:
    reason = known_bug(schedule)
    return [] if reason is None else [pytest.mark.xfail(strict=True, reason=reason)]


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> Figures:
    return request.config.stash.setdefault(FIGURES, Figures(seed=_seed(request.config)))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    figures = terminalreporter.config.stash.get(FIGURES, None)
    if figures is None or not figures.run:
        return
    terminalreporter.write_sep("-", "ddsup chaos")
    for bad in figures.bad:
        terminalreporter.write_line(bad)
    terminalreporter.write_line(figures.line())
    kills = figures.kill_line()
    if kills is not None:
        terminalreporter.write_line(kills)
