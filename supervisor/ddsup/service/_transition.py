"""A service's move from one state to the next, checked and turned into its event.

Apart from :class:`~ddsup.service._service.Service` because it is the one place where
the allowed transitions (``ddsup.record._states``) are enforced and where a
:class:`~ddsup.record._events.UnitTransition` is filled in from the status: every
consumer of a run (status, the event log, the controller's RunState) sees a service
only through these events, so what they carry is decided here, once.
"""

from __future__ import annotations

import time

from ddsup.process import ExitStatus
from ddsup.record import ALLOWED, IllegalTransition, InstanceState, UnitTransition
from ddsup.service._spec import ServiceSpec, ServiceStatus


def transition(
    spec: ServiceSpec,
    status: ServiceStatus,
    attempt_limit: int,
    to: InstanceState,
    reason: str,
    exit: ExitStatus | None = None,
    *,
    timed_out: bool = False,
    until: float | None = None,
) -> UnitTransition:
    """Move ``status`` to ``to`` and return the event that reports it.

    ``timed_out``: the verdict of a readiness timeout; ``attempt_limit``: the restart
    policy's, shown beside the attempt when there is one; ``until``: when a wait ends
    (Unix time). Raises
    :class:`IllegalTransition` for a move the state machine does not allow.
    """
    current = status.state
    if to not in ALLOWED[current]:
        raise IllegalTransition(f"{spec.instance}: {current.value} → {to.value} ({reason})")
    status.state = to
    status.since = time.time()
    status.reason = reason
    if exit is not None:
        status.last_exit = exit
    starting = to is InstanceState.STARTING
    return UnitTransition(
        instance=spec.instance,
        node=spec.node,
        from_state=current,
        to_state=to,
        reason=reason,
        restarts=status.restarts,
        pid=status.pid,
        exit=exit,
        readiness_timeout=timed_out,
        probe=status.probe,
        attempt=status.attempt,
        attempt_limit=attempt_limit if status.attempt is not None else None,
        master_port=spec.master_port if starting else None,
        until=until,
        time=status.since,
    )
