"""The scheduling model of the fake: a fixed number of sequences run, the rest queue.

vLLM runs at most ``--max-num-seqs`` requests at once; later ones wait in a FIFO queue
and are counted in ``vllm:num_requests_waiting``. The fake reproduces exactly that with
a FIFO semaphore (trio wakes waiters in arrival order) and two counters, which is what a
router's admission control reads. It also keeps the counters behind ``/metrics``, owns
the health verdict, and pulls the trigger of ``--crash-after-requests``.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import trio

from ddsup.fake_vllm._behaviour import Behaviour

CRASH_EXIT_STATUS = 1  # what an unhandled error in vLLM's API server exits with
ENGINE_DEAD = "EngineCore encountered an issue. See stack trace (above) for the root cause."


def crash_now(reason: str) -> None:
    """Die the way a crashing vLLM does: at once, no cleanup, no engine shutdown."""
    print(f"fake-vllm: crashing on purpose: {reason}", file=sys.stderr, flush=True)
    os._exit(CRASH_EXIT_STATUS)


@dataclass(frozen=True)
class Snapshot:
    """The engine's counters at one instant, for ``/metrics``."""

    running: int
    waiting: int
    max_num_seqs: int
    success: dict[str, int]
    prompt_tokens: int
    generation_tokens: int


class Engine:
    """Admission (running/waiting), counters, health and the planned crash of one lane."""

    def __init__(self, behaviour: Behaviour, crash: Callable[[str], None] = crash_now) -> None:
        self._behaviour = behaviour
        self._crash = crash
        self._slots = trio.Semaphore(behaviour.max_num_seqs)
        self._running = 0
        self._waiting = 0
        self._finished = 0
        self._success: Counter[str] = Counter()
        self._prompt_tokens = 0
        self._generation_tokens = 0
        self._serving_since: float | None = None
        self._died = trio.Event()
        self.failed = trio.Event()  # a request was refused because the engine is dead

    @property
    def dead(self) -> bool:
        """Whether the engine core process is gone (``EngineDeadError`` in vLLM)."""
        return self._died.is_set()

    def die(self) -> None:
        """The engine core process ended: refuse generation, fail ``/health``."""
        self._died.set()

    def request_failed(self) -> None:
        self.failed.set()

    async def cancel_when_dead(self, scope: trio.CancelScope) -> None:
        """Cancel ``scope`` once the engine dies (the generations it was running end)."""
        await self._died.wait()
        scope.cancel()

    def mark_serving(self) -> None:
        """Called once the port is open: timed knobs count from here."""
        self._serving_since = trio.current_time()

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold one of ``max_num_seqs`` sequence slots, queueing FIFO until one is free."""
        self._waiting += 1
        try:
            await self._slots.acquire()
        finally:
            self._waiting -= 1
        self._running += 1
        try:
            yield
        finally:
            self._running -= 1
            self._slots.release()

    def finished(self, reasons: list[str], prompt_tokens: int, generation_tokens: int) -> None:
        """Count a request whose answer went out in full; maybe crash as told to."""
        self._success.update(reasons)
        self._prompt_tokens += prompt_tokens
        self._generation_tokens += generation_tokens
        self._finished += 1
        limit = self._behaviour.crash_after_requests
        if limit is not None and self._finished >= limit:
            self._crash(f"--crash-after-requests {limit} reached")

    def aborted(self) -> None:
        """Count a request the client gave up on (vLLM's ``finished_reason="abort"``)."""
        self._success["abort"] += 1

    def healthy(self) -> bool:
        """``/health`` verdict: ``--fail-health``, or ``--fail-health-after`` has passed."""
        if self._behaviour.fail_health or self.dead:
            return False
        after = self._behaviour.fail_health_after
        if after is None or self._serving_since is None:
            return True
        return trio.current_time() - self._serving_since < after

    def snapshot(self) -> Snapshot:
        return Snapshot(
            running=self._running,
            waiting=self._waiting,
            max_num_seqs=self._behaviour.max_num_seqs,
            success=dict(self._success),
            prompt_tokens=self._prompt_tokens,
            generation_tokens=self._generation_tokens,
        )
