"""What ``CI`` means to the suite, and the skips a CI run allows (a pytest plugin).

CI is on when ``$CI`` is ``1``, ``true`` or ``yes`` (in any case, blanks around it
ignored): what GitHub Actions, GitLab and ``.ci/run`` set. Anything else (unset, empty,
``0``, ``false``, ``no``) is a developer's machine, where a test may skip when something
it needs is missing (Slurm, a browser, a private network namespace) and says so.

In CI a skip hides a broken runner: the test that did not run looks like one that
passed. So under CI every skip fails the test, unless the test is on the reviewed list
``tests/ci_skips.toml`` (``--ci-skips PATH`` names another), where each entry names a
test and says why it may skip on a CI machine. A test xfailed on purpose is no skip.
The root conftest loads this plugin; ``pytest -p support.ci`` loads it elsewhere.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the backport, as in ddsup.units
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

CI_VALUES = frozenset({"1", "true", "yes"})
SKIP_LIST = Path(__file__).resolve().parents[1] / "ci_skips.toml"


def in_ci(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether this is a CI run (see the module docstring)."""
    return environ.get("CI", "").strip().lower() in CI_VALUES


@dataclass(frozen=True)
class AllowedSkip:
    """A test that may skip in CI, and why.

    ``test`` is a node id as pytest prints it (``tests/dir/test_x.py::test_y``); without
    a ``[parameters]`` part it covers every parametrization of the test.
    """

    test: str
    reason: str

    def covers(self, nodeid: str) -> bool:
        return nodeid == self.test or nodeid.split("[", 1)[0] == self.test


class SkipListError(ValueError):
    """The skip list is not as described in its own header."""


def allowed_skips(path: Path = SKIP_LIST) -> tuple[AllowedSkip, ...]:
    """The entries of the skip list at ``path``; :class:`SkipListError` names a bad one."""
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise SkipListError(f"{path}: {err}") from err
    if set(document) - {"skip"}:
        raise SkipListError(f"{path}: unknown keys {sorted(set(document) - {'skip'})}")
    entries = document.get("skip", [])
    if not isinstance(entries, list):
        raise SkipListError(f"{path}: 'skip' must be an array of tables ([[skip]])")
    found = []
    for number, entry in enumerate(entries, 1):
        where = f"{path}: [[skip]] number {number}"
        if not isinstance(entry, dict) or set(entry) != {"test", "reason"}:
            keys = sorted(entry) if isinstance(entry, dict) else entry
            raise SkipListError(f"{where}: needs exactly the keys 'test' and 'reason', has {keys}")
        test, reason = entry["test"], entry["reason"]
        if not isinstance(test, str) or "::" not in test:
            raise SkipListError(f"{where}: 'test' must be a node id (FILE::NAME), not {test!r}")
        if not isinstance(reason, str) or not reason.strip():
            raise SkipListError(f"{where}: 'reason' must say why {test} may skip in CI")
        found.append(AllowedSkip(test, reason.strip()))
    return tuple(found)


ALLOWED = pytest.StashKey[tuple[AllowedSkip, ...]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--ci-skips",
        type=Path,
        default=SKIP_LIST,
        metavar="PATH",
        help="the skips CI allows (default tests/ci_skips.toml); any other skip fails in CI",
    )


def pytest_configure(config: pytest.Config) -> None:
    path: Path = config.getoption("ci_skips")
    try:
        config.stash[ALLOWED] = allowed_skips(path)
    except SkipListError as err:
        raise pytest.UsageError(str(err)) from err


def _refused(
    config: pytest.Config, nodeid: str, report: pytest.CollectReport | pytest.TestReport
) -> str | None:
    """Why this skip fails the run (None: it may stand)."""
    if not report.skipped or hasattr(report, "wasxfail") or not in_ci():
        return None
    if any(entry.covers(nodeid) for entry in config.stash[ALLOWED]):
        return None
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    listed = config.getoption("ci_skips")
    return (
        f"CI={os.environ['CI']}, and a skip in CI fails unless the test is on {listed}: "
        f"{nodeid}: {reason}"
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    why = _refused(item.config, item.nodeid, report)
    if why is not None:
        report.outcome = "failed"
        report.longrepr = why
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    report = yield
    why = _refused(collector.config, collector.nodeid, report)
    if why is not None:
        report.outcome = "failed"
        report.longrepr = why
    return report
