"""Coarse timeouts for the data path: one task per server checks every deadline each tick.

trio's cancel scopes are exact and composable, and cost several microseconds per scope
and per deadline change; the data path had three deadline changes and one scope per
request, about a fifth of its CPU. The timeouts of the data path need neither property:
they are long (seconds to minutes), and what expires is always one wait on one socket.
So, as nginx does with its event timers, a :class:`Timed` object (a client connection,
an upstream connection in use) stores a plain deadline and, while it waits, what it
waits on; :meth:`Deadlines.run` wakes every :attr:`Deadlines.tick` seconds and, for each
object waiting past its deadline, calls ``trio.lowlevel.notify_closing`` on it. The
waiting task gets ``trio.ClosedResourceError`` and, seeing :attr:`Timed.interrupted`, turns
it into the timeout it is (408, a lane that did not answer, a silent lane). The object
is closed by its owner right after: a timed-out connection is never reused.

A timeout fires between its deadline and one tick later; the tick is a fifth of the
shortest timeout it serves, at most one second.
"""

from __future__ import annotations

import math
import select
import socket
import time

import trio

MAX_TICK = 1.0


Pollable = socket.socket | select.epoll


class Expired(Exception):
    """A :class:`Timed` wait ran past its deadline."""


class Timed:
    """Something that waits with a deadline (a plain float, :func:`time.monotonic`).

    Its waits go through :meth:`wait_readable` and :meth:`wait_writable`, which raise
    :class:`Expired` when :class:`Deadlines` ends them, or whatever :meth:`interrupt`
    was given (the hang-up watch of :mod:`._hangups` ends a lane connection's waits so).
    """

    __slots__ = ("deadline", "interrupted", "waiting_on")

    def __init__(self) -> None:
        self.deadline = math.inf
        self.waiting_on: Pollable | None = None  # what a task waits on right now
        self.interrupted: Exception | None = None  # for the current or next wait to raise

    def expire(self) -> None:
        """End the wait in progress, if any, with :class:`Expired`."""
        if self.waiting_on is not None:
            self.interrupt(Expired())

    def interrupt(self, error: Exception) -> None:
        """Raise ``error`` from the wait in progress, or else from the next one.

        A wait is woken with ``trio.lowlevel.notify_closing``, which unregisters the
        socket: its owner closes it right after (it is never reused).
        """
        self.interrupted = error
        waiting_on = self.waiting_on
        if waiting_on is not None:
            trio.lowlevel.notify_closing(waiting_on)

    async def wait_readable(self, target: Pollable) -> None:
        self.raise_interruption()
        self.waiting_on = target
        try:
            await trio.lowlevel.wait_readable(target)
        except trio.ClosedResourceError:
            self.raise_interruption()
            raise
        finally:
            self.waiting_on = None

    async def wait_writable(self, target: socket.socket) -> None:
        self.raise_interruption()
        self.waiting_on = target
        try:
            await trio.lowlevel.wait_writable(target)
        except trio.ClosedResourceError:
            self.raise_interruption()
            raise
        finally:
            self.waiting_on = None

    def raise_interruption(self) -> None:
        """Raise the interruption, if any, no longer held: raised, it holds frames that
        hold ``self``, and the process collects no cyclic garbage while it serves
        (:mod:`._gc_pacing`).

        A method, not a test of ``self.interrupted`` in the wait itself: there a type
        checker would take the field, once tested None before the ``await``, to be None
        after it too, though another task sets it meanwhile; mypyc compiles what the
        checker believes, and the compiled wait then failed on every interruption.
        """
        error = self.interrupted
        if error is not None:
            self.interrupted = None
            raise error from None


class Deadlines:
    """The set of :class:`Timed` objects of one server, and the task that expires them."""

    def __init__(self, *timeouts: float) -> None:
        self.tick = min(MAX_TICK, min(timeouts, default=5.0) / 5)
        self._timed: set[Timed] = set()

    def add(self, timed: Timed) -> None:
        self._timed.add(timed)

    def discard(self, timed: Timed) -> None:
        self._timed.discard(timed)

    async def run(self) -> None:
        """Expire what waits past its deadline, every :attr:`tick` seconds, until cancelled."""
        while True:
            await trio.sleep(self.tick)
            now = time.monotonic()
            for timed in [t for t in self._timed if t.deadline < now]:
                timed.expire()
