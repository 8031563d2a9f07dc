"""Noticing clients that hang up, at no cost per request.

A client that hangs up while its request is forwarded must end that request: the lane
stops generating for nobody (retries and streams assume it). A connection has no
reader task of its own (it would cost a task switch per request), so something else must
wake the request's task, which is waiting for the lane's bytes, when the client's side
closes.

An epoll set per lane connection, holding its socket and the client's, would cost two
``epoll_ctl`` calls whenever a client's requests move between lanes, which round robin
does at every request.

Instead, as nginx does with ``EPOLLRDHUP`` on its one epoll set, one set per server holds
every client's socket for ``EPOLLRDHUP`` (the peer's FIN or RST, never its
bytes), registered once per connection with ``EPOLLONESHOT`` (reported once, then
quiet until the socket closes, which removes it from the set). One task per server
waits on the set and, for each client that hung up, marks its
:class:`~ddsup.endpoint._connection.Hangup` and
interrupts the lane connection that serves it (:meth:`Timed.interrupt
<ddsup.endpoint._deadlines.Timed.interrupt>`), whose wait then raises
:class:`~ddsup.endpoint._connection.ClientGone`. The request's own waits are plain waits
on the lane's socket; a request costs no ``epoll_ctl`` for hang-ups at all, and a
connection one (its registration); the task wakes once per closed connection.
"""

from __future__ import annotations

import select

import trio

from ddsup.endpoint._connection import Hangup

_HANGUP = select.EPOLLRDHUP | select.EPOLLONESHOT  # EPOLLHUP and EPOLLERR come anyway


class Hangups:
    """The hang-up watch of one server's clients (see the module docstring)."""

    def __init__(self) -> None:
        self._set: select.epoll | None = None
        self._watched: dict[int, Hangup] = {}

    def add(self, fd: int, hangup: Hangup) -> None:
        """Watch the socket ``fd`` until :meth:`discard`; unwatched when not serving."""
        if self._set is None:
            return
        self._set.register(fd, _HANGUP)
        self._watched[fd] = hangup

    def discard(self, fd: int) -> None:
        """Stop watching ``fd``; call it before the socket closes (its number is reused)."""
        self._watched.pop(fd, None)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Watch until cancelled; ``started`` once :meth:`add` watches."""
        with select.epoll() as watch_set:
            self._set = watch_set
            try:
                task_status.started()
                while True:
                    await trio.lowlevel.wait_readable(watch_set)
                    for fd, _events in watch_set.poll(0):
                        hangup = self._watched.get(fd)
                        if hangup is not None:
                            hangup.hung_up()
            finally:
                self._set = None
                self._watched.clear()
