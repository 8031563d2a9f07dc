"""How a run ended: the first cause wins, and it decides exit status and ``result.json``.

Several things can try to end a run at once (the worker exits while a lane fails while a
SIGTERM arrives); only the first is the cause. Later ones are recorded as events, not
as the result, so ``result.json`` always names what actually ended the run.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Any

from ddsup._errors import EXIT_READINESS_TIMEOUT, EXIT_UNIT_FAILED


@dataclass(frozen=True)
class Outcome:
    """The cause of a run's end, as written to ``result.json``."""

    status: str  # ok | worker_failed | usage | invalid_units | preflight_failed | unit_failed | readiness_timeout | stopped
    exit_code: int
    unit: str | None = None
    reason: str = ""
    exit: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        cause: dict[str, Any] = {"reason": self.reason}
        if self.unit is not None:
            cause["unit"] = self.unit
        if self.exit is not None:
            cause["exit"] = self.exit
        return {"status": self.status, "exit_code": self.exit_code, "cause": cause}


def worker_ended(instance: str, exit_json: dict[str, Any] | None, reason: str) -> Outcome:
    """The worker's end ends the run with the worker's own status (128+N for a signal)."""
    exit_json = exit_json or {}
    if "code" in exit_json:
        code = int(exit_json["code"])
    elif "signal" in exit_json:
        code = 128 + _signal_number(exit_json["signal"])
    else:
        code = 1
    return Outcome(
        "ok" if code == 0 else "worker_failed", code, instance, reason, exit_json or None
    )


def unit_failed(
    instance: str, reason: str, exit_json: dict[str, Any] | None, timeout: bool
) -> Outcome:
    if timeout:
        return Outcome("readiness_timeout", EXIT_READINESS_TIMEOUT, instance, reason, exit_json)
    return Outcome("unit_failed", EXIT_UNIT_FAILED, instance, reason, exit_json)


def stopped(signum: int, reason: str) -> Outcome:
    return Outcome("stopped", 128 + signum, None, reason)


def _signal_number(value: Any) -> int:
    if isinstance(value, int):
        return value
    try:
        return int(signal.Signals[str(value)])
    except KeyError:
        return int(str(value))
