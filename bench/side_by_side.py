"""Another revision of ddsup beside this checkout, in one run.

A change's before and after are only comparable when they meet the same machine: these
machines are shared, and their load moves figures more than most changes do. So a bench
given ``--baseline REV`` runs that revision's code and this checkout's in one run,
alternating (:func:`rotations`). :func:`baseline_code` gets the revision's ``supervisor/``
tree (``git archive``, or a directory that already holds the source, where there is no
git history), :func:`baseline_env` runs it, and :func:`export_tree` exports the whole
tree where the bench builds a wheel of it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")


def export_tree(rev: str, directory: Path, *paths: str) -> Path:
    """``paths`` (all of the tree without any) of git revision ``rev``, under ``directory``."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, *paths], capture_output=True, check=False
    )
    if archive.returncode:
        raise SystemExit(f"--baseline {rev}: {archive.stderr.decode().strip()}")
    directory.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(directory)], input=archive.stdout, check=True)
    return directory


def baseline_code(rev: str, directory: Path) -> Path:
    """ddsup's ``supervisor/`` tree as of ``rev``, for ``PYTHONPATH``: exported under
    ``directory``, or ``rev`` itself when it names a directory that holds the source.
    Checked to be the ``ddsup`` that a process started with :func:`baseline_env` imports,
    not this checkout's editable install."""
    given = Path(rev)
    if (given / "ddsup").is_dir():
        source = given.resolve()
    elif (given / "supervisor" / "ddsup").is_dir():
        source = (given / "supervisor").resolve()
    else:
        source = export_tree(rev, directory, "supervisor") / "supervisor"
    check = [sys.executable, "-c", "import ddsup; print(ddsup.__file__)"]
    found = subprocess.run(check, env=baseline_env(source), capture_output=True, text=True)
    if not found.stdout.startswith(str(source)):
        raise SystemExit(f"--baseline {rev}: ddsup was imported from {found.stdout.strip()!r}")
    return source


def baseline_env(source: Path) -> dict[str, str]:
    """The environment whose processes import ``ddsup`` from ``source``: first on
    ``PYTHONPATH``, this checkout's tree taken off it, the rest kept (a machine whose
    ddsup dependencies are on the path beside it)."""
    ours = str(ROOT / "supervisor")
    kept = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != ours]
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(source), *kept])}


def rotations(variants: Sequence[T], reps: int) -> list[list[T]]:
    """``reps`` orders of ``variants``, each starting one later: none always runs first,
    on the load that the bench's own start-up left."""
    count = len(variants)
    return [[*variants[r % count :], *variants[: r % count]] for r in range(reps)]
