"""The exception hierarchy of ddsup, and the exit status and result each one means.

Foreign errors (OSError, httpx, tomllib) are translated at the boundary with
``raise OurError(...) from exc``, so the command line only ever has to map these::

    DdsupError                 any error ddsup reports to a user (exit 1)
    ├── UsageError             bad command line                     → 64
    ├── UnitFileError          invalid unit files (carries Problems) → 65
    ├── PlacementError         the allocation cannot hold the plan  → 69
    ├── PreflightError         a node failed preflight              → 69
    ├── StateDirError          the state dir cannot be created, or is not safe to use → 73
    ├── RunStateError          no run found / run not reachable     → 1
    │   └── UntrustedRunError  the run's files are not the caller's, or not readable → 77
    ├── SlurmError             a Slurm command failed or refused (sbatch, squeue, scancel) → 1
    └── UnitFailed             a unit failed for good (stop-all), or a node agent was lost → 70
        └── ReadinessTimeout   not ready within timeout_start       → 75

Each class names its :class:`ResultStatus` (``result.json`` ``status``). The first four
end ``ddsup start`` before or during start-up; ``UnitFailed`` and ``ReadinessTimeout``
are the causes the run's state (``ddsup.decide._run_state``) gives a run that a unit ended,
and :class:`ddsup.record._outcome.Outcome` is derived from them.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass

EXIT_USAGE = os.EX_USAGE if hasattr(os, "EX_USAGE") else 64
EXIT_INVALID_UNITS = 65
EXIT_PREFLIGHT = 69
EXIT_UNIT_FAILED = 70
EXIT_READINESS_TIMEOUT = 75
EXIT_REQUEUE = 85  # a worker's exit status that asks ddsup to requeue the Slurm job
EXIT_CANT_CREATE = 73  # sysexits EX_CANTCREAT
EXIT_NO_PERMISSION = 77  # sysexits EX_NOPERM


class ResultStatus(str, enum.Enum):
    """How a run ended: ``result.json`` ``status`` (docs/cli.md lists the exit statuses)."""

    OK = "ok"
    WORKER_FAILED = "worker_failed"
    USAGE = "usage"
    INVALID_UNITS = "invalid_units"
    PREFLIGHT_FAILED = "preflight_failed"
    UNIT_FAILED = "unit_failed"
    READINESS_TIMEOUT = "readiness_timeout"
    STOPPED = "stopped"
    REQUEUED = "requeued"
    ERROR = "error"


class DdsupError(Exception):
    """Base of every error ddsup reports to a user; ``exit_status`` is what the CLI returns."""

    exit_status: int = 1
    result_status: ResultStatus = ResultStatus.ERROR


class UsageError(DdsupError):
    """The command line is wrong (unknown flag, missing directory, bad value)."""

    exit_status = EXIT_USAGE
    result_status = ResultStatus.USAGE


@dataclass(frozen=True)
class Problem:
    """One problem in a unit file, printed as ``path:line:col: error: message``."""

    path: str
    line: int
    col: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.col}: error: {self.message}"


class UnitFileError(DdsupError):
    """One or more unit files are invalid; every problem found is carried, not just the first."""

    exit_status = EXIT_INVALID_UNITS
    result_status = ResultStatus.INVALID_UNITS

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = sorted(problems, key=lambda p: (p.path, p.line, p.col, p.message))
        super().__init__("\n".join(str(p) for p in self.problems))


class PlacementError(DdsupError):
    """The allocation (nodes × GPUs) cannot hold what the lane units ask for."""

    exit_status = EXIT_PREFLIGHT
    result_status = ResultStatus.PREFLIGHT_FAILED


class PreflightError(DdsupError):
    """A node failed a preflight check (wrong host, missing GPUs, busy port, unreadable model)."""

    exit_status = EXIT_PREFLIGHT
    result_status = ResultStatus.PREFLIGHT_FAILED


class StateDirError(DdsupError):
    """``ddsup start`` cannot create its state directory, or will not use the one given.

    An existing directory is used only when the caller owns it, nobody else may write to
    it, and it is not a symlink: otherwise another user could read the run's secret or
    make ddsup write through a planted link (docs/security.md).
    """

    exit_status = EXIT_CANT_CREATE


class RunStateError(DdsupError):
    """No run could be found in the state directory, or its control channel is gone."""


class UntrustedRunError(RunStateError):
    """``status``/``stop``/``logs`` will not act on a run whose files are not the caller's.

    Their owner, mode and type are checked before ddsup sends a run's secret to the
    address ``run.json`` names, or signals the pid it names; a file the caller may not
    read is reported here too.
    """

    exit_status = EXIT_NO_PERMISSION


class SlurmError(DdsupError):
    """A Slurm command that ``ddsup submit`` or a ``--job`` command ran failed: it is not
    installed, did not answer in time, or refused (an unknown account, a bad option);
    its own words are in the message."""


class UnitFailed(DdsupError):
    """A unit failed for good and its ``on_failure`` is ``stop-all`` (or an agent was lost).

    ``unit`` names the instance (or ``agent on NODE``); ``str()`` is ``reason`` alone, as
    ``result.json`` ``cause.reason`` records it.
    """

    exit_status = EXIT_UNIT_FAILED
    result_status = ResultStatus.UNIT_FAILED

    def __init__(self, unit: str, reason: str) -> None:
        self.unit = unit
        self.reason = reason
        super().__init__(reason)


class ReadinessTimeout(UnitFailed):
    """A unit did not become ready within its ``timeout_start``."""

    exit_status = EXIT_READINESS_TIMEOUT
    result_status = ResultStatus.READINESS_TIMEOUT
