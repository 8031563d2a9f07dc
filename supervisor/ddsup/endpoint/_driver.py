"""Fast-path connections stepped from one epoll set: no trio task switch per request.

A proxied request on the fast path waits twice: for the client's next request and for
the lane's answer. As a plain trio wait, each costs a registration of the socket
(``EPOLLONESHOT``: one ``epoll_ctl``), trio's bookkeeping of the waiter, and a turn of
the run loop to reschedule the task and resume its coroutine. Bare trio proxies with
the same code and only their waits changed cost most with trio waits, a little less
with tasks woken from one edge-triggered set, and least with coroutines stepped
directly by that set's task: about what a proxy written as callbacks costs.

So a fast-path connection's coroutine is run by :meth:`Driver.drive` in the
connection's task, and its socket waits (:meth:`Timed.wait_readable
<ddsup.endpoint._deadlines.Timed.wait_readable>`) yield a :class:`SocketWait` instead
of calling trio. The socket goes into the server's set (``EPOLLET``: registered once,
never again per wait), the task parks, and when the socket becomes readable the
server's task (:meth:`Driver.run`) sends into the coroutine itself: the request goes on
to its next socket wait without its own task being scheduled. The code is the same
coroutine code whichever runs it, so the fast path keeps one implementation. A stream's
events are handled the same way, by a :class:`Watcher` the coroutine waits on
(:class:`WatchWait`; the stream relay, :mod:`._stream_relay`): one set and one task per
server for every fast-path wait.

What only the connection's own task may do goes back to it:

- a coroutine stepped by :meth:`Driver.run` runs in the server's task, so any trio
  call that takes "the current task" (a cancel scope, a trio wait, a channel) would
  take the wrong one. Such code first awaits :func:`in_own_task`, which hands the
  coroutine back to its task when, and only when, the server's task is stepping it
  (the endpoint does so before its cancel scopes and trio waits). Anything else the
  coroutine yields there is a bug; it is logged and handed back.
- an interruption of a parked wait (a deadline, the client's hang-up: see
  :class:`Timed.interrupt <ddsup.endpoint._deadlines.Timed.interrupt>`) hands the
  coroutine back, which raises it; a cancellation of the task (the server stops) is
  thrown into the coroutine where it waits.

An edge-triggered set reports bytes as they arrive, not bytes that sit unread. A
socket that becomes readable while no wait is parked on it leaves the set, and its
next wait registers it again, which reports what arrived meanwhile. A caller must not
wait before reading unless its last read left the socket empty (a read shorter than
asked for; :mod:`._fast_client` keeps track): bytes left unread from before its last
report would wait for the next arrival.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import select
import socket
import types
from collections.abc import Coroutine, Generator
from typing import Any, TypeVar

import outcome
import trio

log = logging.getLogger("ddsup.endpoint")

T = TypeVar("T")
_EDGE = select.EPOLLIN | select.EPOLLET


class Parked:
    """What a wait parks on when it is not a trio wait on a socket: a wait stepped by the
    :class:`Driver`, or a :class:`Watcher`. :meth:`Timed.interrupt
    <ddsup.endpoint._deadlines.Timed.interrupt>` wakes it."""

    __slots__ = ()

    def wake(self) -> None:
        """Give the task back its wait, which then raises the interruption."""
        raise NotImplementedError


class Stepper(enum.IntEnum):
    """Who is running a driven coroutine's code right now."""

    NOBODY = 0
    OWN_TASK = 1  # the connection's task, in Driver.drive
    SERVER = 2  # the server's task, in Driver.run: trio calls must go back first


class _Stepping:
    """The one piece of global state: trio runs one coroutine step at a time per thread,
    and a driven coroutine never steps another, so whoever steps one sets this."""

    __slots__ = ("by",)

    def __init__(self) -> None:
        self.by = Stepper.NOBODY


STEPPING = _Stepping()


class SocketWait:
    """What a driven coroutine yields to wait until ``sock`` is readable.

    ``timed`` is the :class:`~ddsup.endpoint._deadlines.Timed` that waits: its
    ``waiting_on`` is the parked wait while it is parked, so that an interruption
    finds it.
    """

    __slots__ = ("sock", "timed")

    def __init__(self, sock: socket.socket, timed: Any) -> None:
        self.sock = sock
        self.timed = timed

    def __await__(self) -> Generator[Any, Any, None]:
        yield self


class Watcher(Parked):
    """What handles a socket's readiness itself while a driven coroutine waits for it to
    finish (a stream of the relay, :mod:`._stream_relay`): the driver calls :meth:`ready`
    whenever the socket is readable, and the watcher ends the wait with :meth:`resume`.
    ``driven`` is the wait it ends (set by the driver)."""

    __slots__ = ("driven",)

    def __init__(self) -> None:
        self.driven: Any = None

    def ready(self) -> None:
        raise NotImplementedError

    def resume(self, result: outcome.Outcome[Any], *, inline: bool) -> None:
        """End the wait with ``result``: the coroutine is stepped on at once (``inline``:
        from :meth:`ready`, in the driver's poll loop), or handed back to its own task."""
        self.driven.driver.resume(self.driven, result, inline=inline)


class WatchWait:
    """What a driven coroutine yields to wait until ``watcher`` resumes it, with what
    the coroutine then gets; ``None`` when the socket is closed already."""

    __slots__ = ("sock", "timed", "watcher")

    def __init__(self, sock: socket.socket, timed: Any, watcher: Watcher) -> None:
        self.sock = sock
        self.timed = timed
        self.watcher = watcher

    def __await__(self) -> Generator[Any, Any, Any]:
        return (yield self)


class _OwnTask:
    """What a coroutine stepped by the server's task yields to go back to its own."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, Any, None]:
        yield self


_OWN_TASK = _OwnTask()


async def in_own_task() -> None:
    """Continue in the connection's own task (see the module docstring); a no-op there."""
    if STEPPING.by is Stepper.SERVER:
        await _OWN_TASK


async def checkpoint_in_own_task() -> None:
    """A trio checkpoint, taken in the coroutine's own task."""
    await in_own_task()
    await trio.lowlevel.checkpoint()


@types.coroutine
def _forward(trap: object) -> Generator[Any, Any, Any]:
    """Yield a trio trap of the driven coroutine to trio, as the task's own."""
    return (yield trap)


class _Message(enum.Enum):
    """What the server's task tells a parked connection task when it hands back."""

    SEND = "send the outcome into the coroutine"
    SETTLE = "the coroutine yielded this; deal with it"
    ENDED = "the coroutine ended with this outcome"


class _Driven(Parked):
    """A driven coroutine, its task, and where it waits (when it does)."""

    __slots__ = ("cancel_pending", "context", "coro", "driver", "fd", "stepping", "task", "timed")

    def __init__(self, driver: Driver, coro: Coroutine[Any, Any, Any]) -> None:
        self.driver = driver
        self.coro = coro
        self.task = trio.lowlevel.current_task()
        self.context = self.task.context
        self.fd = -1
        self.timed: Any = None
        self.stepping = False
        self.cancel_pending = False  # the task was cancelled while the server's task stepped it

    def wake(self) -> None:
        self.driver.hand_back(self, _Message.SEND, outcome.Value(None))

    def abort(self, _: object) -> trio.lowlevel.Abort:
        if self.stepping:  # the step hands back when it ends; trio cancels at the next trap
            self.cancel_pending = True
            return trio.lowlevel.Abort.FAILED
        self.driver.unpark(self)
        return trio.lowlevel.Abort.SUCCEEDED


class Driver:
    """The edge-triggered set of one server's fast-path sockets, and the task stepping
    the coroutines that wait on them (see the module docstring)."""

    def __init__(self) -> None:
        self._set: select.epoll | None = None
        self._parked: dict[int, _Driven] = {}  # by socket: the wait parked on it
        self._watched: dict[int, Watcher] = {}  # by socket: what handles it for a wait
        self._registered: dict[int, socket.socket] = {}  # by descriptor: what is in the set

    @property
    def running(self) -> bool:
        return self._set is not None

    def forget(self, sock: socket.socket) -> None:
        """``sock`` is about to close: drop what is known of its descriptor."""
        fd = sock.fileno()
        if self._registered.get(fd) is sock:
            del self._registered[fd]

    async def drive(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` to its end as this task's own, its socket waits off the set."""
        if self._set is None:
            return await coro
        driven = _Driven(self, coro)
        send: outcome.Outcome[Any] = outcome.Value(None)
        while True:
            STEPPING.by = Stepper.OWN_TASK
            try:
                if isinstance(send, outcome.Error):
                    yielded: object = coro.throw(send.error)
                else:
                    yielded = coro.send(send.unwrap())
            except StopIteration as end:
                result: T = end.value
                return result
            finally:
                STEPPING.by = Stepper.NOBODY
            send, ended = await self._settle(driven, yielded)
            if ended:
                result = send.unwrap()
                return result

    async def _settle(self, driven: _Driven, yielded: object) -> tuple[outcome.Outcome[Any], bool]:
        """What to send into the coroutine next once ``yielded`` is dealt with, or (with
        True) the outcome it ended with while the server's task stepped it."""
        while True:
            if type(yielded) is SocketWait or type(yielded) is WatchWait:
                if self._set is None:  # the server stops: a plain wait
                    wait = trio.lowlevel.wait_readable
                    return await outcome.acapture(wait, yielded.sock), False
                if not self._park(driven, yielded):
                    return outcome.Value(None), False  # readable already
                driven.cancel_pending = False
                try:
                    kind, value = await trio.lowlevel.wait_task_rescheduled(driven.abort)
                except BaseException as exc:  # cancelled: raised where the coroutine waits
                    return outcome.Error(exc), False
                if kind is _Message.SETTLE:
                    yielded = value
                    continue
                return value, kind is _Message.ENDED
            if yielded is _OWN_TASK:
                return outcome.Value(None), False
            return await outcome.acapture(_forward, yielded), False  # a trio trap: its own

    def _park(self, driven: _Driven, wait: SocketWait | WatchWait) -> bool:
        """Park ``driven`` on ``wait``'s socket; False when it is closed (its read fails)."""
        sock = wait.sock
        fd = sock.fileno()
        if fd < 0:
            return False
        assert self._set is not None
        if self._registered.get(fd) is not sock:
            try:
                self._set.register(fd, _EDGE)  # readable already: reported at once
            except FileExistsError:  # a descriptor of a closed socket, reused
                self._set.modify(fd, _EDGE)
            self._registered[fd] = sock
        elif type(wait) is WatchWait:  # re-armed: bytes left unread by the last read too
            self._set.modify(fd, _EDGE)
        driven.fd = fd
        driven.timed = wait.timed
        if type(wait) is WatchWait:
            wait.watcher.driven = driven
            wait.timed.waiting_on = wait.watcher
            self._watched[fd] = wait.watcher
        else:
            wait.timed.waiting_on = driven
            self._parked[fd] = driven
        return True

    def unpark(self, driven: _Driven) -> None:
        if self._parked.get(driven.fd) is driven:
            del self._parked[driven.fd]
        elif (watcher := self._watched.get(driven.fd)) is not None and watcher.driven is driven:
            del self._watched[driven.fd]
        if driven.timed is not None:
            driven.timed.waiting_on = None
            driven.timed = None

    def hand_back(self, driven: _Driven, kind: _Message, value: object) -> None:
        """Give the coroutine back to its parked task, with what it must do next."""
        self.unpark(driven)
        trio.lowlevel.reschedule(driven.task, outcome.Value((kind, value)))

    def resume(self, driven: _Driven, result: outcome.Outcome[Any], *, inline: bool) -> None:
        """A watcher ends ``driven``'s wait with ``result``: stepped on at once (``inline``:
        from its ``ready``, in this task's poll loop), or handed back to its own task."""
        if inline:
            self._step(driven, result)
        else:
            self.hand_back(driven, _Message.SEND, result)

    def _step(self, driven: _Driven, send: outcome.Outcome[Any] | None = None) -> None:
        """Its socket is readable (or its watcher is done, ``send``): step ``driven``
        until it waits again, or hand it back."""
        self.unpark(driven)
        driven.stepping = True
        STEPPING.by = Stepper.SERVER
        kind: _Message
        value: object
        try:
            while True:
                try:
                    if send is None:
                        yielded = driven.context.run(driven.coro.send, None)
                    elif isinstance(send, outcome.Error):
                        yielded = driven.context.run(driven.coro.throw, send.error)
                    else:
                        yielded = driven.context.run(driven.coro.send, send.unwrap())
                except StopIteration as end:
                    kind, value = _Message.ENDED, outcome.Value(end.value)
                    break
                except BaseException as exc:
                    kind, value = _Message.ENDED, outcome.Error(exc)
                    break
                send = None
                waits = type(yielded) is SocketWait or type(yielded) is WatchWait
                if waits and not driven.cancel_pending:
                    if self._park(driven, yielded):
                        return
                    continue  # readable already
                if not waits and type(yielded) is not _OwnTask:
                    log.error("bug: a trio call stepped by the server's task: %r", yielded)
                kind, value = _Message.SETTLE, yielded
                break
        finally:
            driven.stepping = False
            STEPPING.by = Stepper.NOBODY
        self.hand_back(driven, kind, value)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Step the parked coroutines as their sockets become readable, until cancelled."""
        with select.epoll() as ready_set:
            self._set = ready_set
            try:
                task_status.started()
                while True:
                    await trio.lowlevel.wait_readable(ready_set)
                    for fd, _events in ready_set.poll(0):
                        driven = self._parked.get(fd)
                        if driven is not None:
                            self._step(driven)
                        elif (watcher := self._watched.get(fd)) is not None:
                            watcher.ready()
                        elif self._registered.pop(fd, None) is not None:
                            self._unregister(fd)
            finally:
                self._set = None
                for driven in list(self._parked.values()):
                    self.hand_back(driven, _Message.SEND, outcome.Value(None))
                for watcher in list(self._watched.values()):
                    watcher.wake()  # the watcher gives the wait back
                self._registered.clear()

    def _unregister(self, fd: int) -> None:
        """Readable with no wait parked on it: this report is spent, so out of the set
        until its next wait, whose registration reports the bytes that came meanwhile."""
        assert self._set is not None
        with contextlib.suppress(OSError):  # closed meanwhile: the kernel took it out
            self._set.unregister(fd)
