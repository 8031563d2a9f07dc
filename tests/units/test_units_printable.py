"""Paths, names and keys are printed with control characters escaped, never raw.

A file name is attacker-controlled text (a shared directory, an unpacked archive): a
name carrying ``ESC [`` sequences must not act on the terminal, and one carrying a
newline must not forge a ``path:line:col: error:`` line for an editor or CI to believe.
Each command that prints unit-file problems is run as a user runs it, with Python's
strict encoder on stdout and stderr (as in a UTF-8 locale), so a non-UTF-8 file name
would also show up as a traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from units_helpers import lines

from ddsup.units import printable

WORKER = lines("[unit]", 'type = "worker"', "[service]", 'exec = ["w"]')
HOSTILE = "bad\x1b[31mred\nfake.toml:9:9: error: forged.toml"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("units/lane@.toml", "units/lane@.toml"),
        ("a\x1b[2Jb", "a\\x1b[2Jb"),
        ("a\nb\rc\td", "a\\nb\\rc\\td"),
        ("\x00\x7f\x85\x9b", "\\x00\\x7f\\x85\\x9b"),
        ("abc\u202edcba.toml", "abc\\u202edcba.toml"),  # right-to-left override
        ("a\u2028b\u2029c\u200bd\ufeff", "a\\u2028b\\u2029c\\u200bd\\ufeff"),
        ("x\udcff.toml", "x\\xff.toml"),  # a non-UTF-8 byte of a file name (PEP 383)
        ("modèle 日本 \\ \u00a0 ok", "modèle 日本 \\ \u00a0 ok"),
        ("\U000e0001", "\\U000e0001"),  # a tag character (format, outside the BMP)
    ],
)
def test_printable(text: str, shown: str) -> None:
    assert printable(text) == shown


def ddsup(*args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONIOENCODING": "utf-8:strict", "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "ddsup", *map(str, args)],
        capture_output=True,
        text=True,
        errors="surrogateescape",
        env=env,
        check=False,
        timeout=60,
    )


def assert_harmless(output: str) -> None:
    """Nothing but printable characters and line ends, and no traceback."""
    assert "Traceback" not in output
    bad = sorted({c for c in output if c != "\n" and not c.isprintable()})
    assert not bad, f"raw control characters in output: {bad!r}\n{output}"


@pytest.fixture
def hostile_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "job"
    directory.mkdir()
    (directory / "endpoint.toml").write_text(lines("[unit]", 'type = "endpoint"'))
    (directory / HOSTILE).write_text(WORKER)
    key = lines("[unit]", 'type = "oneshot"', "[service]", 'exec = ["x"]', '"\\u001b[2J" = 1')
    (directory / "svc.toml").write_text(key)
    os.mkdir(os.fsencode(directory) + b"/sub")
    (Path(os.fsdecode(os.fsencode(directory) + b"/x\xff.toml"))).write_text(WORKER)
    return directory


def test_verify_escapes_file_names_and_keys(hostile_dir: Path) -> None:
    done = ddsup("verify", hostile_dir)
    assert done.returncode == 65, done.stderr
    assert_harmless(done.stdout + done.stderr)
    name = "bad\\x1b[31mred\\nfake.toml:9:9: error: forged"
    out = done.stdout.splitlines()
    assert (
        f"{hostile_dir}/{name}.toml:1:1: error: invalid unit name '{name}': use letters, "
        "digits, '_', '.', '-' (and a final '@' for a template, as in lane@.toml)"
    ) in out
    assert (
        f"{hostile_dir}/x\\xff.toml:1:1: error: invalid unit name 'x\\xff': use letters, "
        "digits, '_', '.', '-' (and a final '@' for a template, as in lane@.toml)"
    ) in out
    assert f"{hostile_dir}/svc.toml:5:1: error: unknown key '\\x1b[2J' in [service]" in done.stdout
    assert f"more than one worker unit ({name}, x\\xff)" in done.stdout
    assert len(out) == int(done.stderr.split()[0])  # a line per problem: no name broke one


def test_verify_escapes_paths_that_do_not_exist_and_clean_summaries(tmp_path: Path) -> None:
    missing = tmp_path / "no\x1b]0;title\x07pe.toml"
    done = ddsup("verify", missing)
    assert done.returncode == 65
    assert_harmless(done.stdout + done.stderr)
    assert done.stdout == (
        f"{tmp_path}/no\\x1b]0;title\\x07pe.toml:1:1: error: cannot read unit file: "
        "no such file or directory\n"
    )
    clean = tmp_path / "job\x1b[1m"
    clean.mkdir()
    (clean / "worker.toml").write_text(WORKER)
    done = ddsup("verify", clean)
    assert done.returncode == 0, done.stdout
    assert done.stderr == f"ok: 1 unit in {tmp_path}/job\\x1b[1m\n"


def test_plan_escapes_file_names(hostile_dir: Path, tmp_path: Path) -> None:
    done = ddsup("plan", hostile_dir, "--gpus-per-node", "1")
    assert done.returncode == 65
    assert_harmless(done.stdout + done.stderr)
    name = "bad\\x1b[31mred\\nfake.toml:9:9: error: forged.toml"
    assert f"{hostile_dir}/{name}:1:1: error: invalid unit name" in done.stderr
    done = ddsup("plan", tmp_path / "no\ndir", "--gpus-per-node", "1")
    assert done.returncode == 64
    assert_harmless(done.stdout + done.stderr)
    assert f"{tmp_path}/no\\ndir: not a directory of unit files" in done.stderr


def test_plan_escapes_node_names(tmp_path: Path) -> None:
    (tmp_path / "worker.toml").write_text(WORKER)
    done = ddsup("plan", tmp_path, "--nodelist", "n\x1b5m1", "--gpus-per-node", "1")
    assert done.returncode == 0, done.stderr
    assert_harmless(done.stdout + done.stderr)
    assert "n\\x1b5m1" in done.stdout


def test_start_escapes_file_names(hostile_dir: Path, tmp_path: Path) -> None:
    done = ddsup(
        "start",
        hostile_dir,
        "--launcher",
        "local",
        "--gpus-per-node",
        "1",
        "--state-dir",
        tmp_path / "state",
    )
    assert done.returncode == 65
    assert_harmless(done.stdout + done.stderr)
    assert f"{hostile_dir}/x\\xff.toml:1:1: error: invalid unit name" in done.stderr
