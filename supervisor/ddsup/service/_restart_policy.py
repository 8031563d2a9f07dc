"""When one unit instance may start again, after how long, and which attempt it is.

The rules (docs/units.md, ``[service]``), for a service's own restarts and, counted once
per replica, for a multi-node replica (``ddsup.decide._replicas``):

- **Attempts at becoming ready.** A start that never became ready (not ready within
  ``timeout_start``, or ended before its probe passed) is a failed attempt.
  ``start_limit_burst`` failed attempts in a row fail the unit, with no time window: a
  lane that is never ready ends the run (75) after exactly that many attempts, however
  long ``timeout_start`` is. Becoming ready starts the count again.
- **Crash loops.** Every start also counts in a window: more than ``start_limit_burst``
  starts inside ``start_limit_interval`` fail the unit too (one that becomes ready and
  crashes, over and over).
- **Backoff.** The next start waits ``restart_sec · 2^k`` (k consecutive failures),
  capped at ``restart_max_sec``, with ±10 % jitter (never above the cap); k returns to 0
  once the unit has stayed ready for ``restart_max_sec``.

Time is whatever clock the caller passes: ``trio.current_time()`` in a service, event
times in the run's state.
"""

from __future__ import annotations

import random
from collections import deque

from ddsup.record import human_duration
from ddsup.units import ServiceSection


class RestartPolicy:
    """The start limit and backoff of one instance (or one replica)."""

    def __init__(self, service: ServiceSection) -> None:
        self.service = service
        self.attempt = 0  # the current start's attempt at becoming ready (1, 2, …)
        self._starts: deque[float] = deque()
        self._unready = 0  # starts in a row that have not become ready
        self._failures = 0

    @property
    def limit(self) -> int:
        return self.service.start_limit_burst

    def admit(self, now: float) -> str | None:
        """Count a start at ``now``; why it may not happen (None: it may)."""
        burst, window = self.service.start_limit_burst, self.service.start_limit_interval
        while self._starts and now - self._starts[0] > window:
            self._starts.popleft()
        if self._unready >= burst:
            return (
                f"not ready after {self._unready} attempts in a row (start_limit_burst = {burst})"
            )
        if len(self._starts) >= burst:
            return (
                f"{len(self._starts)} starts within {human_duration(window)} "
                f"(start_limit_burst = {burst})"
            )
        self._starts.append(now)
        self._unready += 1
        self.attempt = self._unready
        return None

    def exhausted(self) -> str | None:
        """Why no start may follow, whenever it would be (None: that depends on when)."""
        burst = self.service.start_limit_burst
        if self._unready >= burst:
            return (
                f"not ready after {self._unready} attempts in a row (start_limit_burst = {burst})"
            )
        return None

    def became_ready(self) -> None:
        """The current start is ready: the next failed one is attempt 1 again."""
        self._unready = 0

    def delay(self, ready_for: float) -> float:
        """Seconds before the next start, after one that was ready for ``ready_for``."""
        service = self.service
        if ready_for >= service.restart_max_sec:
            self._failures = 0
        # 2^k for k up to 64 only: the cap has won long before, and a float overflows
        # past 2^1023 (a crash loop that long would end the supervisor, not the unit)
        doubled = service.restart_sec * 2.0 ** min(self._failures, 64)
        base: float = min(doubled, service.restart_max_sec)
        self._failures += 1
        return min(base * random.uniform(0.9, 1.1), service.restart_max_sec)
