"""Installing ddsup as the docs say, and ``ddsup --version`` saying which code it is.

ddsup has no release on a package index: docs/quickstart.md §3 installs it from a
checkout, packaging/README.md builds a wheel for an image. The slow tests here run those
very command blocks, taken from the pages, in fresh virtual environments (the only
changes: the pages' install paths become temporary ones, and the wheel is built into a
temporary directory instead of the checkout's ``dist/``), and check what the installed
``ddsup --version`` says.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import ddsup
from ddsup._install import origin

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "docs" / "quickstart.md"
PACKAGING = ROOT / "packaging" / "README.md"


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(cwd), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


needs_git_checkout = pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(),
    reason="needs git and a git checkout of ddsup",
)


# -- where a ddsup came from ----------------------------------------------------------------


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_checkout_names_its_commit_and_its_changes(tmp_path: Path) -> None:
    package = tmp_path / "supervisor" / "ddsup"
    package.mkdir(parents=True)
    (tmp_path / "pyproject.toml").write_text("[project]\n")
    (package / "__init__.py").write_text("")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    env = ["-c", "user.name=t", "-c", "user.email=t@t"]
    _git(tmp_path, *env, "commit", "-q", "-m", "one")
    head = _git(tmp_path, "rev-parse", "HEAD")

    assert origin(package) == f"checkout {tmp_path}, commit {head[:12]}"
    (package / "__init__.py").write_text("changed = True\n")
    assert origin(package) == f"checkout {tmp_path}, commit {head[:12]} with uncommitted changes"


def test_an_installed_wheel_names_the_commit_it_was_built_from(tmp_path: Path) -> None:
    package = tmp_path / "site-packages" / "ddsup"
    package.mkdir(parents=True)
    assert origin(package) == "wheel"  # built without git (or with a torn record)
    (package / "_build.json").write_text("{not json")
    assert origin(package) == "wheel"
    (package / "_build.json").write_text(json.dumps({"commit": "a" * 40, "modified": False}))
    assert origin(package) == f"wheel, built from commit {'a' * 12}"


def test_version_prints_on_stdout_and_exits_0() -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "ddsup", "--version"], capture_output=True, text=True, check=False
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith(f"ddsup {ddsup.__version__} ("), shown.stdout
    assert shown.stderr == ""


# -- the pages' commands, followed ----------------------------------------------------------


def _bash_block(page: Path, heading: str) -> list[str]:
    """The command lines of the first ``bash`` block under ``heading`` (comments cut)."""
    text = page.read_text(encoding="utf-8")
    section = text[text.index(heading) :]
    block = re.search(r"^```bash\n(.*?)^```", section, re.S | re.M)
    assert block is not None, f"no bash block under {heading!r} in {page.name}"
    lines = [re.sub(r"(^|\s)#.*$", "", line).strip() for line in block[1].splitlines()]
    return [line for line in lines if line]


def _follow(lines: list[str], cwd: Path, paths: dict[str, str]) -> dict[str, str]:
    """Run each line (``cd`` moves on to the checkout), with ``paths`` replaced; the
    output of each command, by its line as written."""
    outputs = {}
    for line in lines:
        argv = shlex.split(line)
        if argv[0] == "cd":
            cwd = ROOT
            continue
        command = argv
        for written, ours in paths.items():
            command = [ours + a[len(written) :] if a.startswith(written) else a for a in command]
        if command[0] == "python3":
            command[0] = sys.executable
        done = subprocess.run(
            command, cwd=cwd, capture_output=True, text=True, timeout=400, check=False
        )
        assert done.returncode == 0, f"{line}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        outputs[line] = done.stdout
    return outputs


@pytest.mark.slow
@pytest.mark.timeout(900)
@needs_git_checkout
def test_the_quickstart_installs_from_the_checkout(tmp_path: Path) -> None:
    lines = _bash_block(QUICKSTART, "## 3. Install on the cluster")
    assert lines[0] == "cd ddsup", lines
    venv = tmp_path / "software" / "ddsup"
    outputs = _follow(lines, tmp_path, {"/shared/software/ddsup": str(venv)})

    head = _git(ROOT, "rev-parse", "HEAD")
    [version] = [out for line, out in outputs.items() if line.endswith("ddsup --version")]
    assert version.startswith(f"ddsup {ddsup.__version__} (wheel, built from commit {head[:12]}")
    verified = subprocess.run(
        [str(venv / "bin" / "ddsup"), "verify", str(ROOT / "units" / "examples" / "rehearsal")],
        cwd=tmp_path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert verified.returncode == 0, verified.stderr


@pytest.mark.slow
@pytest.mark.timeout(900)
@needs_git_checkout
def test_a_wheel_built_from_the_checkout_says_its_commit_in_the_image(tmp_path: Path) -> None:
    lines = _bash_block(PACKAGING, "### Into a container image")
    dist, image = tmp_path / "dist", tmp_path / "opt" / "ddsup"
    build = [line for line in lines if " wheel " in line]
    assert build == ["python3 -m pip wheel --no-deps -w dist ."], lines
    _follow(build, ROOT, {"dist": str(dist)})
    [wheel] = dist.glob("ddsup-*.whl")
    rest = [line for line in lines if line not in build]
    written = {"/opt/ddsup": str(image), "ddsup-0.1.0-py3-none-any.whl": wheel.name}
    outputs = _follow(rest, dist, written)

    head = _git(ROOT, "rev-parse", "HEAD")
    [version] = [out for line, out in outputs.items() if line.endswith("ddsup --version")]
    assert version.startswith(f"ddsup {ddsup.__version__} (wheel, built from commit {head[:12]}")
