"""When a unit may start again, and after how long: the start limit and the backoff.

More than ``start_limit_burst`` starts inside ``start_limit_interval`` and the unit has
failed. After an unclean exit the next start waits ``restart_sec · 2^k`` (k consecutive
failures), capped at ``restart_max_sec``, with ±10 % jitter (never above the cap); k
resets to 0 once the unit has stayed ready for ``restart_max_sec``. Pure bookkeeping on
the times it is given (the service passes trio's clock, which tests can jump).
"""

from __future__ import annotations

import random
from collections import deque

from ddsup.units._model import ServiceSection


class RestartPolicy:
    """The start history and consecutive failures of one service."""

    def __init__(self, service: ServiceSection) -> None:
        self.service = service
        self._starts: deque[float] = deque()
        self._failures = 0

    @property
    def recent_starts(self) -> int:
        """Starts inside the current window (as of the last :meth:`admit`)."""
        return len(self._starts)

    def admit(self, now: float) -> bool:
        """Count a start at ``now``; False when it would be over the start limit."""
        while self._starts and now - self._starts[0] > self.service.start_limit_interval:
            self._starts.popleft()
        if len(self._starts) >= self.service.start_limit_burst:
            return False
        self._starts.append(now)
        return True

    def next_delay(self, ready_for: float) -> float:
        """The delay before restarting after a failure, the process having been ready for
        ``ready_for`` seconds (long enough, and the failures before are forgiven)."""
        service = self.service
        if ready_for >= service.restart_max_sec:
            self._failures = 0
        base: float = min(service.restart_sec * (2.0**self._failures), service.restart_max_sec)
        self._failures += 1
        return min(base * random.uniform(0.9, 1.1), service.restart_max_sec)
