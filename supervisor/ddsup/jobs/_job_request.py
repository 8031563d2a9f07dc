"""What one ``ddsup submit`` asks for: the ``[job]`` settings of a profile, the unit
directory's ``job.toml`` and the flags, laid over each other in that order, and checked.

A profile is ``${XDG_CONFIG_HOME:-~/.config}/ddsup/profiles/NAME.toml``, named by
``--profile NAME``, else by ``job.toml``'s ``profile``, else ``default.toml`` when there
is one. Nodes and GPUs per node must be said somewhere: the plan is checked against
them before anything is submitted.
"""

from __future__ import annotations

import os
import platform
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ddsup import __version__
from ddsup._errors import UsageError
from ddsup.units import JOB_FILE, JobSettings, load_job_file, printable

DEFAULT_PROFILE = "default"
DEFAULT_MIN_FREE = 1 << 30  # bytes free in the state directory: a day of lanes' logs


@dataclass(frozen=True)
class Versions:
    """The ddsup and Python that submit: every node of the job must run the same."""

    ddsup: str
    python: str
    host: str

    @classmethod
    def here(cls) -> Versions:
        return cls(__version__, platform.python_version(), socket.gethostname())


@dataclass(frozen=True)
class JobRequest:
    """A submission, every value decided: what the batch script is rendered from."""

    unit_dir: Path
    settings: JobSettings  # every source laid over the others
    job_name: str
    nodes: int
    gpus_per_node: int
    state_dir: Path
    python: str
    min_free_space: int
    sources: tuple[str, ...]  # the files read, in order (for the script's header)
    profile: str | None
    versions: Versions


def config_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``${XDG_CONFIG_HOME:-~/.config}/ddsup``."""
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "ddsup"


def resolve_request(
    unit_dir: Path,
    flags: JobSettings,
    *,
    profile: str | None,
    state_dir: Path | None = None,
    environ: Mapping[str, str] | None = None,
    versions: Versions | None = None,
) -> JobRequest:
    """The request ``flags`` (and ``--profile``, ``--state-dir``) make of ``unit_dir``:
    UsageError (64) for what is missing, UnitFileError (65) for a bad file."""
    unit_dir = Path(os.path.abspath(unit_dir))
    sources: list[str] = []
    job_file = unit_dir / JOB_FILE
    own = JobSettings()
    if job_file.exists():
        own = load_job_file(str(job_file))
    name = profile or own.profile
    base = JobSettings()
    found = _profile_path(name, environ)
    if found is not None:
        base = load_job_file(str(found), profile=True)
        sources.append(str(found))
    if job_file.exists():
        sources.append(str(job_file))
    settings = flags.over(own.over(base))
    nodes, gpus = _shape(settings, unit_dir)
    job_name = settings.job_name or _name_of(unit_dir)
    root = Path(settings.state_root) if settings.state_root else Path.cwd()
    return JobRequest(
        unit_dir=unit_dir,
        settings=settings,
        job_name=job_name,
        nodes=nodes,
        gpus_per_node=gpus,
        state_dir=Path(os.path.abspath(state_dir)) if state_dir else root / job_name,
        python=settings.python or sys.executable,
        min_free_space=settings.min_free_space or DEFAULT_MIN_FREE,
        sources=tuple(sources),
        profile=None if found is None else found.stem,
        versions=versions or Versions.here(),
    )


def _profile_path(name: str | None, environ: Mapping[str, str] | None) -> Path | None:
    """The profile file ``name`` names (UsageError when it has none); without a name,
    ``default.toml`` when it exists."""
    directory = config_dir(environ) / "profiles"
    if name is None:
        default = directory / f"{DEFAULT_PROFILE}.toml"
        return default if default.exists() else None
    if not name or "/" in name or name.startswith("."):
        raise UsageError(f"--profile {printable(name)!r}: a profile is a name, e.g. cluster-a")
    path = directory / f"{name}.toml"
    if path.exists():
        return path
    try:
        known = sorted(p[:-5] for p in os.listdir(directory) if p.endswith(".toml"))
    except OSError:
        known = []
    there = f" (profiles there: {', '.join(known)})" if known else ""
    raise UsageError(
        f"no profile {printable(name)!r}: {printable(str(path))} does not exist{there}"
    )


def _shape(settings: JobSettings, unit_dir: Path) -> tuple[int, int]:
    missing = [
        flag
        for flag, value in (
            ("--nodes", settings.nodes),
            ("--gpus-per-node", settings.gpus_per_node),
        )
        if value is None
    ]
    if missing:
        keys = " and ".join(m[2:].replace("-", "_") for m in missing)
        raise UsageError(
            f"say how big the job is: {' and '.join(missing)} (or {keys} in "
            f"{printable(str(unit_dir / JOB_FILE))} or a profile; `ddsup plan` shows what fits)"
        )
    assert settings.nodes is not None and settings.gpus_per_node is not None
    return settings.nodes, settings.gpus_per_node


def _name_of(unit_dir: Path) -> str:
    """The job's default name: the unit directory's, made a valid one."""
    cleaned = "".join(
        c if (c.isascii() and c.isalnum()) or c in "_.-" else "-" for c in unit_dir.name
    )
    return cleaned.lstrip("._-") or "ddsup"
