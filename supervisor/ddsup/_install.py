"""Which ddsup this is (``ddsup --version``): its version, and where it came from.

A job runs whatever ddsup its image or virtual environment holds, so the version alone
does not say which code that is. Two origins are told apart:

- **a checkout**: the package is imported from ``supervisor/ddsup`` of a git work tree
  (``pip install -e .``, or ``python -m ddsup`` there): its commit, asked of git, and
  whether files differ from it;
- **a wheel**: installed with pip (from a checkout, a built wheel or an sdist, each of
  which pip turns into a wheel); the commit it was built from when the build could ask
  git (``packaging/hatch_build.py`` writes ``_build.json`` into the wheel and the sdist).

Imported only for ``--version`` (``_cli`` imports it on use), so no command pays for it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from ddsup import __version__

BUILD_RECORD = "_build.json"  # written by packaging/hatch_build.py
GIT_TIMEOUT = 10.0
SHOWN = 12  # characters of a commit shown


def version_text() -> str:
    """``ddsup 0.1.0 (checkout /src/ddsup, commit 5fe8e46a1b2c)`` or ``(wheel, …)``."""
    return f"ddsup {__version__} ({origin(Path(__file__).resolve().parent)})"


def origin(package: Path) -> str:
    """Where the package in ``package`` (``…/ddsup``) came from, in words."""
    built = _build_record(package / BUILD_RECORD)
    root = package.parent.parent  # <checkout>/supervisor/ddsup
    if built is None and (root / "pyproject.toml").is_file() and (root / ".git").exists():
        commit = _git(root, "rev-parse", "HEAD")
        if commit is None:
            return f"checkout {root}"
        modified = _git(root, "status", "--porcelain", "--untracked-files=no")
        return f"checkout {root}, commit {_described(commit, bool(modified))}"
    if built is None:
        return "wheel"
    return f"wheel, built from commit {_described(*built)}"


def _described(commit: str, modified: bool) -> str:
    return commit[:SHOWN] + (" with uncommitted changes" if modified else "")


def _build_record(path: Path) -> tuple[str, bool] | None:
    """``(commit, modified)`` from the build's record; None without a usable one."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("commit"), str):
        return None
    return data["commit"], data.get("modified") is True


def _git(root: Path, *args: str) -> str | None:
    """git's answer in ``root``, stripped; None when git is missing or fails."""
    try:
        done = subprocess.run(
            ["git", "-C", str(root), *args],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None
