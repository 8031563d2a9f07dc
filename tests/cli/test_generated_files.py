"""The files generated from the parser (bash completion, ``ddsup(1)``) are current and work.

Both are committed, so that nothing runs Python at <Tab> or ``man ddsup``; each generator
has ``--check``, and a change to the command line that is not regenerated fails here.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGING = Path(__file__).resolve().parents[2] / "packaging"


@pytest.mark.parametrize("generator", ["make-completion.py", "make-manpage.py"])
def test_the_generated_file_is_current(generator: str) -> None:
    done = subprocess.run(
        [sys.executable, str(PACKAGING / generator), "--check"],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "300"},  # no terminal width may matter
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.skipif(
    shutil.which("groff") is None,
    reason="groff is not installed (apt-get install groff-base; .ci/install-tools)",
)
def test_the_man_page_renders_without_warnings() -> None:
    done = subprocess.run(
        ["groff", "-man", "-Tutf8", "-ww", "-P-cbu", str(PACKAGING / "ddsup.1")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    lines = done.stdout.splitlines()
    for heading in ("NAME", "SYNOPSIS", "DESCRIPTION", "COMMANDS", "EXIT STATUS", "FILES"):
        assert heading in lines, heading
    assert "   ddsup restart" in lines and "       --rolling" in lines


def _plan(state: Path, instances: list[str]) -> None:
    state.mkdir()
    (state / "run.json").write_text(json.dumps({"invocation_id": state.name}))
    items = [{"instance": name, "unit": name.split("@")[0] + "@"} for name in instances]
    (state / "plan.json").write_text(json.dumps({"instances": items}, indent=2, sort_keys=True))


def _complete(words: list[str], cwd: Path) -> list[str]:
    script = (
        f"source {PACKAGING / 'ddsup.bash-completion'}\n"
        f"COMP_WORDS=({' '.join(words)}); COMP_CWORD={len(words) - 1}\n"
        "_ddsup; printf '%s\\n' \"${COMPREPLY[@]}\"\n"
    )
    done = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, cwd=cwd, check=True
    )
    return done.stdout.split()


def test_unit_arguments_complete_the_instances_of_the_run(tmp_path: Path) -> None:
    _plan(tmp_path / "ddsup-1", ["lane@0", "lane@1", "lane@1:1", "endpoint", "worker"])
    assert _complete(["ddsup", "logs", "la"], tmp_path) == ["lane", "lane@0", "lane@1", "lane@1:1"]
    assert _complete(["ddsup", "restart", "--rolling", "lane@"], tmp_path) == [
        "lane@0",
        "lane@1",
        "lane@1:1",
    ]
    _plan(tmp_path / "other", ["chat@0", "worker"])
    words = ["ddsup", "logs", "--state-dir", "other", "''"]
    assert _complete(words, tmp_path) == ["chat", "chat@0", "worker"]
    assert _complete(["ddsup", "logs", "x"], tmp_path / "other") == []  # no run there
