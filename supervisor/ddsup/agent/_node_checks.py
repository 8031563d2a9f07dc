"""Preflight checks of the job a node runs in: the same ddsup and Python as the one that
submitted it, and room for the run's logs.

``ddsup submit`` writes what it ran with into the batch script's environment
(:data:`SUBMIT_ENVIRONMENT`), which ``ddsup start`` and every agent inherit (``srun
--export=ALL``): each compares its own versions with those, and the free space of the
state directory on its node with the least the job asked for. A run not submitted by
``ddsup submit`` has none of these variables and skips these checks. Each problem says
how to fix it; the caller names the node.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from ddsup import __version__
from ddsup.units import format_size, parse_size


@dataclass(frozen=True)
class _SubmitEnvironment:
    """The variables ``ddsup submit``'s batch script exports for these checks."""

    version: str = "DDSUP_SUBMIT_VERSION"
    python: str = "DDSUP_SUBMIT_PYTHON"
    host: str = "DDSUP_SUBMIT_HOST"
    min_free: str = "DDSUP_MIN_FREE_SPACE"


SUBMIT_ENVIRONMENT = _SubmitEnvironment()


def python_version() -> str:
    """``3.12.3``, as ``platform.python_version()`` says it (without importing it)."""
    info = sys.version_info
    return f"{info.major}.{info.minor}.{info.micro}"


def version_problem(environ: Mapping[str, str]) -> str | None:
    """Why this node's ddsup or Python is not the submitter's; None when it is (or when
    the job was not submitted by ``ddsup submit``)."""
    names = SUBMIT_ENVIRONMENT
    wanted = {"ddsup": environ.get(names.version), "Python": environ.get(names.python)}
    here = {"ddsup": __version__, "Python": python_version()}
    wrong = [name for name, value in wanted.items() if value and value != here[name]]
    if not wrong:
        return None
    mine = " and ".join(f"{name} {here[name]}" for name in wrong)
    theirs = " and ".join(f"{name} {wanted[name]}" for name in wrong)
    host = environ.get(names.host) or "the submitting host"
    return (
        f"{mine} here, but the job was submitted with {theirs} on {host}: install the same "
        f"ddsup and Python at {sys.executable} on every node (on the shared file system, "
        "or in the same image), or submit with the python that every node has"
    )


def space_problem(state_dir: str, environ: Mapping[str, str]) -> str | None:
    """Why the state directory has too little room here for the run's logs; None when it
    has enough, when the job asked for nothing, or when it cannot be measured (the
    writes themselves then report it)."""
    least = _least(environ.get(SUBMIT_ENVIRONMENT.min_free))
    if least is None:
        return None
    try:
        stats = os.statvfs(state_dir)
    except OSError:
        return None
    free = stats.f_bavail * stats.f_frsize
    if free >= least:
        return None
    return (
        f"{format_size(free)} free for logs in {state_dir} (the job asks for "
        f"{format_size(least)}): free some space there, or submit with a state_root on a "
        "larger file system (min_free_space in job.toml lowers the bar)"
    )


def _least(text: str | None) -> int | None:
    if not text:
        return None
    try:
        return parse_size(text)
    except ValueError:
        return None
