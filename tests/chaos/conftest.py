"""Options and figures of the chaos suite.

``pytest tests/chaos --chaos-runs N --chaos-seed S`` runs schedules ``schedule-S-0`` …
``schedule-S-(N-1)``; each is reproducible from its id alone (``--chaos-seed S
--chaos-only I``, or ``DDSUP_CHAOS_SEED=S`` and ``-k schedule-S-I``). The session ends
with one figure line::

    chaos: seed S, schedules run N, orphans found X, wrong exit codes Y, wrong statuses W,
    hangs Z, injections not fired M

where the counts are of schedules (a schedule with two orphans counts once).

The seed is ``--chaos-seed``, else ``$DDSUP_CHAOS_SEED``, else, in CI (``CI=true``), a
new one every run (printed when the schedules are collected, and in the figure line),
else 1. The options exist when pytest is pointed at ``tests/chaos`` (or a file in it);
from the top of the suite the environment variables apply.
"""

from __future__ import annotations

import os
import secrets

import pytest
from chaos_harness import Figures
from chaos_known_bugs import REGRESSIONS, known_bug
from chaos_schedule import Schedule, make_schedule

from support.ci import in_ci

DEFAULT_RUNS = 50
DEFAULT_SEED = 1


FIGURES = pytest.StashKey[Figures]()
SEED = pytest.StashKey[int]()
ROTATED = pytest.StashKey[bool]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("chaos", "ddsup chaos schedules")
    group.addoption(
        "--chaos-runs",
        type=int,
        default=int(os.environ.get("DDSUP_CHAOS_RUNS", DEFAULT_RUNS)),
        help=f"schedules to run (default {DEFAULT_RUNS}, or $DDSUP_CHAOS_RUNS)",
    )
    group.addoption(
        "--chaos-seed",
        type=int,
        default=None,
        help=f"seed of the schedules (default $DDSUP_CHAOS_SEED, else new in CI, else {DEFAULT_SEED})",
    )
    group.addoption(
        "--chaos-only",
        type=int,
        action="append",
        default=None,
        metavar="I",
        help="run only schedule I of the seed (repeatable)",
    )


def _option(config: pytest.Config, name: str, env: str, default: int) -> int:
    """The option's value; its default when this conftest was not loaded at start-up."""
    try:
        value = config.getoption(name)
    except ValueError:
        return int(os.environ.get(env, default))
    return int(value)


def _seed(config: pytest.Config) -> int:
    """The session's seed (see the module docstring), chosen once."""
    if SEED in config.stash:
        return config.stash[SEED]
    try:
        seed = config.getoption("chaos_seed")
    except ValueError:
        seed = None
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
        f"DDSUP_CHAOS_SEED={seed} pytest tests/chaos -k schedule-{seed}-I"
    ]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "schedule" not in metafunc.fixturenames:
        return
    config = metafunc.config
    seed = _seed(config)
    runs = _option(config, "chaos_runs", "DDSUP_CHAOS_RUNS", DEFAULT_RUNS)
    try:
        only = config.getoption("chaos_only")
    except ValueError:
        only = None
    indices = list(only) if only else list(range(runs))
    schedules = [make_schedule(seed, i) for i in indices]
    if not only:  # regressions run whatever the seed (those it does not cover already)
        covered = {(seed, i) for i in indices}
        schedules += [make_schedule(s, i) for s, i in REGRESSIONS if (s, i) not in covered]
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
