"""Accepting client connections: a cap on open connections, and running out of descriptors survived.

``trio.serve_listeners`` accepts without bound and, once the process is out of file
descriptors (``EMFILE``), logs a traceback every 100 ms for as long as that lasts (a
stream of them under a low ``ulimit -n``). Here each process:

- raises its soft ``RLIMIT_NOFILE`` to the hard limit at start (:func:`raise_fd_limit`):
  a proxy needs two descriptors per busy connection (the client's and the lane's), and
  the common soft limit of 1,024 is a default, not a decision;
- holds at most ``max_connections`` client connections open (:func:`connection_cap`,
  lowered to what the descriptor limit allows): past that it stops accepting, and new
  connections wait in the kernel's listen queue (where another worker of the same port
  may take them) until one closes;
- on ``EMFILE`` (and ``ENFILE``, ``ENOBUFS``, ``ENOMEM``) backs off, from 10 ms doubling
  to 1 s, and logs one line per episode, not one per retry, and no traceback.
"""

from __future__ import annotations

import errno
import logging
import resource
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import trio

log = logging.getLogger("ddsup.endpoint")

CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
BACKOFF_FIRST = 0.01  # seconds: the first pause after a capacity error …
BACKOFF_MAX = 1.0  # … doubling up to this
RESERVED_FDS = 64  # descriptors kept for everything else (logs, links, listeners, samples)

Handler = Callable[[trio.SocketStream], Awaitable[None]]


def raise_fd_limit() -> int:
    """Raise this process's soft descriptor limit to its hard limit; the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (OSError, ValueError) as err:  # a container may refuse: serve within the old one
            log.warning("cannot raise the file descriptor limit to %d: %s", hard, err)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def connection_cap(max_connections: int, fd_limit: int) -> int:
    """``max_connections``, lowered to what ``fd_limit`` allows (two descriptors each)."""
    fits = max(1, (fd_limit - RESERVED_FDS) // 2)
    if max_connections > fits:
        log.warning(
            "max_connections %d needs more file descriptors than the limit of %d allows: "
            "serving at most %d connections at once (raise `ulimit -n` to serve more)",
            max_connections,
            fd_limit,
            fits,
        )
        return fits
    return max_connections


@dataclass
class _Backoff:
    """The pauses after capacity errors, and the one log line per episode."""

    delay: float = 0.0
    failures: int = 0

    async def failed(self, err: OSError) -> None:
        if not self.failures:
            log.warning(
                "cannot accept connections: %s; pausing accepts (up to %g s at a time) until "
                "descriptors free up; raise `ulimit -n` or lower max_connections",
                err.strerror or errno.errorcode.get(err.errno or 0, err),
                BACKOFF_MAX,
            )
        self.failures += 1
        self.delay = min(BACKOFF_MAX, self.delay * 2 or BACKOFF_FIRST)
        await trio.sleep(self.delay)

    def succeeded(self) -> None:
        self.delay, self.failures = 0.0, 0


async def serve_listeners(
    handler: Handler,
    listeners: list[trio.SocketListener],
    *,
    max_connections: int,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Accept on every listener, each connection served by ``handler`` in its own task."""
    slots = trio.Semaphore(max_connections)
    backoff = _Backoff()
    async with trio.open_nursery() as nursery:
        for listener in listeners:
            nursery.start_soon(_accept_loop, listener, handler, slots, backoff, nursery)
        task_status.started()


async def _accept_loop(
    listener: trio.SocketListener,
    handler: Handler,
    slots: trio.Semaphore,
    backoff: _Backoff,
    nursery: trio.Nursery,
) -> None:
    while True:
        await slots.acquire()
        try:
            stream = await listener.accept()
        except OSError as err:
            slots.release()
            if err.errno not in CAPACITY_ERRNOS:
                raise
            await backoff.failed(err)
            continue
        except BaseException:
            slots.release()
            raise
        backoff.succeeded()
        nursery.start_soon(_serve_one, handler, stream, slots)


async def _serve_one(handler: Handler, stream: trio.SocketStream, slots: trio.Semaphore) -> None:
    try:
        await handler(stream)
    finally:
        slots.release()
