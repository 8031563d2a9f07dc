"""A rank of a multi-node replica held between its replica's starts: take-down, hold, resume.

Apart from :class:`~ddsup.service._service.Service` because it is the one part of a
service's life decided elsewhere: the run (``ddsup.decide._replicas``) restarts a
replica's ranks as one, so a rank whose process ended (or that the run took down
because a peer's did) waits here, in ``restarting``, until the run resumes it (after a
delay, with a fresh rendezvous port) or gives it up. This class keeps only that
conversation; the service makes the transitions.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from ddsup.process import ExitStatus
from ddsup.service._spec import REPLICA_RESTARTS, Resume, ServiceSpec


class ReplicaHold:
    """The take-down, hold and resume orders of one replica rank (its service's task)."""

    def __init__(self) -> None:
        self.down_reason: str | None = None  # the run took this rank down, and why
        self._held: trio.Event | None = None  # set when a held rank may go on
        self._order = Resume()

    @property
    def waiting(self) -> bool:
        """Held, with no order from the run yet."""
        return self._held is not None and not self._held.is_set()

    def take_down(self, reason: str) -> bool:
        """A peer went down; True when this rank's current start must end for it.

        A rank already held, with no resume pending, has nothing to take down.
        """
        if self.waiting:
            return False
        self.down_reason = reason
        return True

    def resume(self, delay: float, attempt: int, respec: Callable[[], ServiceSpec]) -> None:
        """The run restarts the replica: this rank starts again after ``delay``."""
        self._go_on(Resume(delay, attempt, respec))

    def fail(self, reason: str, readiness_timeout: bool) -> None:
        """The run gives the replica up: this rank has failed for good."""
        self._go_on(Resume(failure=(reason, readiness_timeout)))

    def _go_on(self, order: Resume) -> None:
        if self._held is not None and not self._held.is_set():
            self._order = order
            self._held.set()

    def hold(self) -> trio.Event:
        """Begin to hold (before the transition is reported: an order may come from the
        run while it handles that event); the take-down, if any, is consumed."""
        self.down_reason, self._held = None, trio.Event()
        return self._held

    async def wait(self, held: trio.Event) -> Resume:
        """Until the run's order for this hold."""
        await held.wait()
        order, self._held = self._order, None
        return order


def held_reason(
    down_reason: str | None,
    status: ExitStatus | None,
    *,
    timed_out: bool,
    timeout_reason: str,
    unresponsive: str | None,
) -> tuple[str, ExitStatus | None]:
    """Why a rank is held, and the exit to report with it (none for a take-down or a
    readiness timeout: no exit of its own ended it)."""
    if down_reason is not None:
        why, exit = down_reason, None
    elif timed_out:
        why, exit = timeout_reason, None
    elif unresponsive:
        why, exit = unresponsive, status
    else:
        why, exit = (status.describe() if status else "ended"), status
    return f"{why}; {REPLICA_RESTARTS}", exit
