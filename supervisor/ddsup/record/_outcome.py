"""How a run ended: the first cause wins, and it decides exit status and ``result.json``.

Several things can try to end a run at once (the worker exits while a lane fails while a
SIGTERM arrives); only the first is the cause. Later ones are recorded as events, not
as the result, so ``result.json`` always names what actually ended the run.

A cause is one of four typed values, and :meth:`Outcome.of` is the one place that turns
a cause into a status and an exit code:

- :class:`WorkerEnded`: the worker's own exit status (``ok`` / ``worker_failed``, or
  ``requeued`` for :data:`~ddsup._errors.EXIT_REQUEUE`: the controller then requeues
  the Slurm job, or says in the reason why it could not, as ``worker_failed``);
- :class:`Stopped`: a stop signal or ``ddsup stop`` (``stopped``, 128+N);
- :class:`UnitFailure`: a unit failed for good, or an agent was lost; its
  :attr:`~UnitFailure.error` is a :class:`~ddsup._errors.UnitFailed` (70) or a
  :class:`~ddsup._errors.ReadinessTimeout` (75);
- any other :class:`~ddsup._errors.DdsupError` (usage 64, invalid units 65, placement or
  preflight 69), which ends a run before or while it starts.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

from ddsup._errors import EXIT_REQUEUE, DdsupError, ReadinessTimeout, ResultStatus, UnitFailed
from ddsup._exit import ExitJson, ExitStatus
from ddsup._json import Json

if TYPE_CHECKING:  # typing's own from Python 3.11; these annotations are never evaluated
    from typing_extensions import NotRequired

    from ddsup.record._faults import FaultsJson


@dataclass(frozen=True)
class WorkerEnded:
    """The worker's process ended: its exit status is the run's (128+N for a signal)."""

    instance: str
    exit: ExitStatus | None
    reason: str


@dataclass(frozen=True)
class Stopped:
    """A stop signal (``ddsup start``'s or an agent's) or ``ddsup stop``: 128+N."""

    signum: int
    reason: str


@dataclass(frozen=True)
class UnitFailure:
    """A unit failed for good (``on_failure = "stop-all"``) or a node agent was lost."""

    instance: str
    reason: str
    exit: ExitStatus | None = None
    readiness_timeout: bool = False

    @property
    def error(self) -> UnitFailed:
        """The error this failure is: a :class:`ReadinessTimeout` when that ended it."""
        kind = ReadinessTimeout if self.readiness_timeout else UnitFailed
        return kind(self.instance, self.reason)


Cause = WorkerEnded | Stopped | UnitFailure | DdsupError


class CauseJson(TypedDict):
    """An outcome's ``cause``: why the run ended, what ended it, how its process did."""

    reason: str
    unit: NotRequired[str]
    exit: NotRequired[ExitJson]


class OutcomeJson(TypedDict):
    """``result.json`` (and the outcome of the ``ending`` and ``finished`` events);
    ``record``: only in ``result.json``, only when the run's record is incomplete."""

    status: str
    exit_code: int
    cause: CauseJson
    record: NotRequired[FaultsJson]


@dataclass(frozen=True)
class Outcome:
    """The cause of a run's end, as written to ``result.json``."""

    status: ResultStatus
    exit_code: int
    unit: str | None = None
    reason: str = ""
    exit: ExitStatus | None = None

    @classmethod
    def of(cls, cause: Cause) -> Outcome:
        if isinstance(cause, WorkerEnded):
            code = _exit_code(cause.exit)
            status = ResultStatus.OK if code == 0 else ResultStatus.WORKER_FAILED
            if cause.exit is not None and cause.exit.code == EXIT_REQUEUE:
                status = ResultStatus.REQUEUED
            return cls(status, code, cause.instance, cause.reason, cause.exit)
        if isinstance(cause, Stopped):
            return cls(ResultStatus.STOPPED, 128 + cause.signum, None, cause.reason)
        if isinstance(cause, UnitFailure):
            error = cause.error
            return cls(error.result_status, error.exit_status, error.unit, error.reason, cause.exit)
        return cls(cause.result_status, cause.exit_status, getattr(cause, "unit", None), str(cause))

    def to_dict(self) -> OutcomeJson:
        """``result.json`` (and the ``ending``/``finished`` events): a JSON boundary."""
        cause: CauseJson = {"reason": self.reason}
        if self.unit is not None:
            cause["unit"] = self.unit
        if self.exit is not None:
            cause["exit"] = self.exit.to_json()
        return {"status": self.status.value, "exit_code": self.exit_code, "cause": cause}

    @classmethod
    def from_dict(cls, data: Mapping[str, Json]) -> Outcome:
        """Read back :meth:`to_dict`; ValueError when it is not one."""
        cause = data.get("cause")
        code = data.get("exit_code")
        if not isinstance(cause, Mapping) or not isinstance(code, int) or isinstance(code, bool):
            raise ValueError("an outcome needs an int exit_code and a cause object")
        unit, reason = cause.get("unit"), cause.get("reason", "")
        if not isinstance(reason, str) or not (unit is None or isinstance(unit, str)):
            raise ValueError("an outcome's cause needs a string reason (and unit)")
        exit_json = cause.get("exit")
        return cls(
            ResultStatus(data.get("status")),
            code,
            unit,
            reason,
            None if exit_json is None else exit_from_json(exit_json),
        )


def _exit_code(exit: ExitStatus | None) -> int:
    if exit is None:
        return 1
    if exit.code is not None:
        return exit.code
    assert exit.signal is not None
    return 128 + exit.signal


def exit_from_json(data: object) -> ExitStatus:
    """``{"code": N}`` or ``{"signal": "SIGKILL"}`` (``ExitStatus.to_json``) back; ValueError."""
    if isinstance(data, Mapping) and len(data) == 1:
        code, name = data.get("code"), data.get("signal")
        if isinstance(code, int) and not isinstance(code, bool):
            return ExitStatus(code=code)
        if isinstance(name, str):
            return ExitStatus(signal=_signal_number(name))
    raise ValueError(f"not an exit status: {data!r}")


def _signal_number(name: str) -> int:
    """``SIGKILL`` → 9; ``signal 99`` (one Python has no name for) → 99."""
    try:
        return int(signal.Signals[name])
    except KeyError:
        number = name.removeprefix("signal ").strip()
        if number.isdigit():
            return int(number)
        raise ValueError(f"unknown signal {name!r}") from None
