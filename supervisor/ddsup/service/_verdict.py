"""What follows a process's own end: start again (after a backoff), exit, or fail.

Apart from :class:`~ddsup.service._service.Service` because it is the restart rule of
docs/units.md in one place, decided as a value (:class:`Verdict`) from what the start
showed; the service only applies it. The arithmetic (start limit, backoff) is
``_restart_policy``'s. After an unclean exit (or any exit with ``restart = "always"``)
the next start waits a backoff; a readiness timeout and a liveness kill are unclean; a
start limit that no start can pass any more fails the unit now, not after a backoff.

A lane's own exit is unclean whatever its status: a lane serves until it is stopped, and
vLLM's API server exits 0 once its engine has died (``EngineDeadError``), which under
``restart = "on-failure"`` would otherwise leave the model a lane short for good.
"""

from __future__ import annotations

from dataclasses import dataclass

from ddsup.process import ExitStatus
from ddsup.record import COMPLETED, InstanceState, human_duration
from ddsup.service._restart_policy import RestartPolicy
from ddsup.service._spec import ServiceSpec
from ddsup.units import Restart, UnitType

LANE_EXIT = "a lane's own exit is a failure"  # said after a lane's successful exit status


@dataclass(frozen=True)
class Ended:
    """How the latest start ended, as the verdict needs it."""

    status: ExitStatus  # the process's exit
    ready_for: float  # seconds it was ready
    timed_out: bool  # not ready within timeout_start
    timeout_reason: str  # why, when it timed out
    unresponsive: str | None  # why the liveness probes killed it (None: they did not)


@dataclass(frozen=True)
class Verdict:
    """The transition that follows an end, and the delay before the next start."""

    to: InstanceState  # EXITED, FAILED or RESTARTING
    reason: str
    exit: ExitStatus | None
    timed_out: bool = False
    delay: float | None = None  # RESTARTING: seconds before the next start; else None
    completed: bool = False  # a oneshot that succeeded: it counts as ready


def verdict(spec: ServiceSpec, policy: RestartPolicy, ended: Ended) -> Verdict:
    """After the process ended by itself: restart (with its delay), exit, or fail."""
    service = spec.unit.service
    status, timed_out = ended.status, ended.timed_out
    success = status.is_success(service.success_exit_status)
    if spec.unit.type is UnitType.ONESHOT and success:
        return Verdict(InstanceState.EXITED, COMPLETED, status, completed=True)
    exited_well = success and not timed_out and not ended.unresponsive
    lane = spec.unit.type is UnitType.LANE  # a replica's rank is a lane's too
    clean = exited_well and not lane
    restart = service.restart is Restart.ALWAYS or (
        service.restart is Restart.ON_FAILURE and not clean
    )
    why = ended.timeout_reason if timed_out else ended.unresponsive or status.describe()
    if lane and exited_well:
        why = f"{why} ({LANE_EXIT})"
    exit = None if timed_out else status
    exhausted = policy.exhausted() if restart else None
    if exhausted is not None:  # no start can follow: fail now, not after a backoff
        reason = f"start limit hit: {exhausted}; last: {why}"
        return Verdict(InstanceState.FAILED, reason, exit, timed_out=timed_out)
    if not restart:
        if clean:
            return Verdict(InstanceState.EXITED, why, status)
        return Verdict(InstanceState.FAILED, why, exit, timed_out=timed_out)
    delay = policy.delay(ended.ready_for)
    reason = f"{why}; restart in {human_duration(delay)}"
    return Verdict(InstanceState.RESTARTING, reason, exit, timed_out=timed_out, delay=delay)
