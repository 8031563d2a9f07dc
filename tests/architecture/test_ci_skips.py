"""In CI no test skips silently: a skip fails unless the reviewed list says why it may.

``CI`` means one thing everywhere in the suite (``support.ci.in_ci``). The plugin is run
here on a small suite of its own, in a pytest of its own, as CI runs it; the repository's
list is checked to name tests that exist, so that an entry cannot outlive its test.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from support import ci

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"

SUITE = """\
import pytest

def test_passes():
    pass

def test_skips_unlisted():
    pytest.skip("a port is busy")

@pytest.mark.skipif(True, reason="no such thing here")
def test_marked_skip_unlisted():
    pass

def test_skips_listed():
    pytest.skip("the machine cannot")

@pytest.mark.parametrize("n", [1, 2])
def test_listed_by_name(n):
    pytest.skip("the machine cannot either")

@pytest.fixture
def missing():
    pytest.skip("a tool is not installed")

def test_fixture_skips(missing):
    pass

@pytest.mark.xfail(strict=True, reason="a known bug")
def test_known_bug():
    raise AssertionError
"""

LISTED = """\
[[skip]]
test = "test_suite.py::test_skips_listed"
reason = "listed on purpose"

[[skip]]
test = "test_suite.py::test_listed_by_name"
reason = "every parametrization"
"""


def _outcomes(tmp_path: Path, ci_value: str | None, *files: tuple[str, str]) -> dict[str, str]:
    """Run the small suite under ``CI=ci_value``; each test's outcome by name."""
    for name, text in (("pytest.ini", "[pytest]\n"), ("skips.toml", LISTED), *files):
        (tmp_path / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci_value is not None:
        env["CI"] = ci_value
    env["PYTHONPATH"] = str(TESTS)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "support.ci", "-p", "no:cacheprovider",
         "--ci-skips", str(tmp_path / "skips.toml"), "--junitxml", str(tmp_path / "out.xml"),
         "-q", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert (tmp_path / "out.xml").exists(), done.stdout + done.stderr
    outcomes = {}
    for case in ET.parse(tmp_path / "out.xml").iter("testcase"):
        kinds = [
            "xfailed" if child.get("type") == "pytest.xfail" else child.tag
            for child in case
            if child.tag in {"skipped", "failure", "error"}
        ]
        outcomes[case.get("name", "")] = kinds[0] if kinds else "passed"
    return outcomes


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, False),
        ("", False),
        ("0", False),
        ("false", False),
        ("no", False),
        ("off", False),
        ("1", True),
        ("true", True),
        ("TRUE", True),
        (" yes ", True),
    ],
)
def test_ci_means_one_thing(value: str | None, expected: bool) -> None:
    environ = {} if value is None else {"CI": value}
    assert ci.in_ci(environ) is expected


def test_in_ci_an_unlisted_skip_fails_and_a_listed_one_stands(tmp_path: Path) -> None:
    outcomes = _outcomes(tmp_path, "true", ("test_suite.py", SUITE))
    assert outcomes == {
        "test_passes": "passed",
        "test_skips_unlisted": "failure",
        "test_marked_skip_unlisted": "error",  # a skip mark acts at setup
        "test_skips_listed": "skipped",
        "test_listed_by_name[1]": "skipped",
        "test_listed_by_name[2]": "skipped",
        "test_fixture_skips": "error",
        "test_known_bug": "xfailed",
    }


def test_outside_ci_a_skip_is_a_skip(tmp_path: Path) -> None:
    outcomes = _outcomes(tmp_path, "false", ("test_suite.py", SUITE))
    skipped = {name for name, outcome in outcomes.items() if outcome == "skipped"}
    assert skipped == {name for name in outcomes if name not in {"test_passes", "test_known_bug"}}


def test_in_ci_a_module_that_skips_fails_its_collection(tmp_path: Path) -> None:
    module = 'import pytest\npytest.skip("not here", allow_module_level=True)\n'
    outcomes = _outcomes(tmp_path, "yes", ("test_gone.py", module))
    assert outcomes == {"test_gone": "error"}


def test_a_bad_list_is_refused_with_its_place(tmp_path: Path) -> None:
    bad = tmp_path / "skips.toml"
    bad.write_text(
        '[[skip]]\ntest = "tests/x.py::test_y"\nreason = "fine"\n\n[[skip]]\ntest = "x"\n'
    )
    with pytest.raises(ci.SkipListError) as info:
        ci.allowed_skips(bad)
    assert str(info.value) == (
        f"{bad}: [[skip]] number 2: needs exactly the keys 'test' and 'reason', has ['test']"
    )


def test_every_listed_skip_names_a_test_that_exists() -> None:
    entries = ci.allowed_skips()
    assert len(entries) <= 5, "a long list is a CI that checks little: run the tests instead"
    for entry in entries:
        path, _, name = entry.test.split("[", 1)[0].partition("::")
        source = ROOT / path
        assert source.is_file(), f"{ci.SKIP_LIST}: {entry.test}: no file {path}"
        tree = ast.parse(source.read_text(encoding="utf-8"))
        names = {
            n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        }
        assert name in names, f"{ci.SKIP_LIST}: {entry.test}: no test {name} in {path}"
