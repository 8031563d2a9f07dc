"""``ddsup verify`` as a user runs it: a subprocess, its output and exit status."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from units_helpers import lines

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "units" / "examples"


def verify(*paths: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ddsup", "verify", *map(str, paths)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_examples_are_clean() -> None:
    result = verify(EXAMPLES / "rehearsal", EXAMPLES / "vllm-llama-8b")
    assert result.returncode == 0, result.stdout
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"ok: 3 units in {EXAMPLES / 'rehearsal'}",
        f"ok: 3 units in {EXAMPLES / 'vllm-llama-8b'}",
    ]


def test_problems_are_lines_on_stdout_and_exit_65(tmp_path: Path) -> None:
    (tmp_path / "w.toml").write_text(
        lines("[unit]", 'type = "worker"', "[service]", 'exec = "python3 x.py"', "timeout_stop = 5")
    )
    (tmp_path / "bad.toml").write_bytes(b"\xff\xfe\x00")
    result = verify(tmp_path)
    assert result.returncode == 65
    assert result.stdout.splitlines() == [
        f"{tmp_path}/bad.toml:1:1: error: not UTF-8 text (byte 0xff)",
        f'{tmp_path}/w.toml:4:8: error: [service] exec: exec must be an argument vector, e.g. ["python3", "x.py"] — ddsup never runs a shell',
        f'{tmp_path}/w.toml:5:16: error: [service] timeout_stop: duration 5 has no unit; write a string with one: "5s" or "5m" (units: ms, s, m, h)',
    ]
    assert result.stderr == "3 problems found\n"
    assert "Traceback" not in result.stdout + result.stderr


def test_missing_path_is_a_problem(tmp_path: Path) -> None:
    result = verify(tmp_path / "nope.toml")
    assert result.returncode == 65
    assert (
        result.stdout
        == f"{tmp_path}/nope.toml:1:1: error: cannot read unit file: no such file or directory\n"
    )


def test_single_file_with_its_siblings() -> None:
    result = verify(EXAMPLES / "rehearsal" / "worker.toml")
    assert result.returncode == 0
    assert result.stderr.startswith("ok: 1 unit in ")


def test_no_path_is_a_usage_error() -> None:
    assert verify().returncode == 64


def test_nul_characters_are_refused_where_they_are_written(tmp_path: Path) -> None:
    """A NUL passed ``verify`` and made ``start`` crash at exec, with no result.json."""
    units = tmp_path / "units"
    units.mkdir()
    (units / "w.toml").write_text(
        lines(
            "[unit]",
            'type = "worker"',
            "[service]",
            'exec = ["sh", "-c", "echo\\u0000hi"]',
            'environment = { X = "a\\u0000b" }',
            'working_directory = "x\\u0000"',
            "[ready]",
            'exec = ["true\\u0000"]',
        )
    )
    said = "contains a NUL character (\\u0000), which no argument, environment variable or path can hold"
    expected = [
        f"{units}/w.toml:4:21: error: [service] exec[2]: {said}",
        f"{units}/w.toml:5:21: error: [service] environment.X: value of X {said}",
        f"{units}/w.toml:6:21: error: [service] working_directory: {said}",
        f"{units}/w.toml:8:9: error: [ready] exec[0]: {said}",
    ]
    result = verify(units)
    assert (result.returncode, result.stdout.splitlines()) == (65, expected), result.stderr
    start = subprocess.run(
        [sys.executable, "-m", "ddsup", "start", str(units), "--state-dir", str(tmp_path / "s")],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert start.returncode == 65, start.stderr
    assert start.stderr.splitlines()[:4] == expected
    assert "Traceback" not in start.stderr
    assert not (tmp_path / "s").exists()
