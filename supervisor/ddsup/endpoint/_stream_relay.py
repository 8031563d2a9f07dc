"""Relaying streamed answers (SSE) to fast-path clients without a task switch per event.

A streamed answer arrives as many small reads: one per token or batch of tokens, each
passed on to the client as it came (:mod:`._proxy`). Done by the request's task, each
read costs a trio wait and wake of that task: the lane's socket is registered again
(``EPOLLONESHOT``: one ``epoll_ctl``), the task is rescheduled and its coroutine chain
resumed. Measured side by side (``bench/endpoint_compare.py``, ``floor proxy tasks`` and
``floor proxy epoll``), a bare trio proxy built that way spent 36–44 µs per event, and
one that relays from callbacks off a single edge-triggered epoll set, as nginx does,
20–32 µs; the endpoint, 37–49 µs before this relay and 28–34 µs with it.

So, once an answer turns out to be a stream, the request's task parks here
(:meth:`StreamRelay.follow`), and one task per server relays for every such stream: the
lane's socket is in one epoll set (``EPOLLET``: registered once per stream, never again
per event), the task waits on the set and, for each ready lane, reads, passes the bytes
on through the proxy's own :meth:`~ddsup.endpoint._proxy.Proxy._pass_buffered` (the same
framing, checks and series hook as in the task) and writes them to the client. Every
read refreshes the silence deadline, as the task's loop does.

Anything but that happy path hands the stream back to its task, which then goes on
exactly as it would have without the relay, so errors, timeouts and backpressure keep
one implementation each:

- the body ended: its last bytes stay queued for the task (see :mod:`._proxy`: the
  caller records the request in the metrics before it flushes);
- the client did not take a write whole (backpressure: the task's flush waits);
- the read filled the buffer (more may be waiting), was the lane's EOF, or failed
  (the task reads again and sees the same);
- the bytes were bad (the proxy's :class:`~ddsup.endpoint._connection.Abort` is raised
  in the task);
- the client hung up, or the lane stayed silent past its deadline: both interrupt the
  lane connection's wait (:meth:`Timed.interrupt <ddsup.endpoint._deadlines.Timed.interrupt>`),
  which wakes the task with :class:`~ddsup.endpoint._connection.ClientGone` or
  :class:`~ddsup.endpoint._deadlines.Expired`;
- the task was cancelled (the server stops): the stream leaves the set.
"""

from __future__ import annotations

import enum
import select
import time
from collections.abc import Callable

import outcome
import trio

from ddsup.endpoint._connection import ClientConnection
from ddsup.endpoint._driver import Parked, in_own_task
from ddsup.endpoint._upstream import UpstreamConnection
from ddsup.endpoint._wire import RECEIVE_SIZE

_EDGE = select.EPOLLIN | select.EPOLLET


class Handback(enum.Enum):
    """Why a stream went back to its task (see the module docstring)."""

    DONE = "the body ended; its last bytes are queued"
    FLUSH = "the client did not take the bytes whole"
    READ = "the task reads the lane itself"


Pass = Callable[[], bool]  # queue what the lane sent for the client; True at the body's end


class _Stream(Parked):
    """One stream in the relay: its lane connection, client and parked task."""

    __slots__ = ("client", "conn", "fd", "pass_on", "relay", "silence", "task")

    def __init__(
        self,
        relay: StreamRelay,
        conn: UpstreamConnection,
        client: ClientConnection,
        pass_on: Pass,
        silence: float,
    ) -> None:
        self.relay = relay
        self.conn = conn
        self.client = client
        self.pass_on = pass_on
        self.silence = silence
        self.fd = conn.wire.fd
        self.task = trio.lowlevel.current_task()

    def wake(self) -> None:
        """An interruption (hang-up, deadline): back to the task, which raises it."""
        self.hand_back(outcome.Value(Handback.READ))

    def hand_back(self, result: outcome.Outcome[Handback]) -> None:
        self.relay.leave(self)
        self.conn.waiting_on = None
        trio.lowlevel.reschedule(self.task, result)

    def ready(self) -> None:
        """The lane's socket became readable: relay what came, or hand the stream back."""
        conn = self.conn
        try:
            data = conn.wire.sock.recv(RECEIVE_SIZE)
        except BlockingIOError:
            return
        except OSError as err:
            self.hand_back(outcome.Error(err))
            return
        if not data:
            self.hand_back(outcome.Value(Handback.READ))  # EOF: the task reads it again
            return
        conn.buffer += data
        try:
            done = self.pass_on()
        except Exception as err:  # the proxy's Abort, raised where it would have been
            self.hand_back(outcome.Error(err))
            return
        if done:
            self.hand_back(outcome.Value(Handback.DONE))
            return
        if not self.client.flush_now():
            self.hand_back(outcome.Value(Handback.FLUSH))
        elif len(data) == RECEIVE_SIZE:
            self.hand_back(outcome.Value(Handback.READ))  # more may be waiting
        else:
            conn.deadline = time.monotonic() + self.silence


class StreamRelay:
    """The streams of one server's fast-path clients, and the task that relays them."""

    def __init__(self) -> None:
        self._set: select.epoll | None = None
        self._streams: dict[int, _Stream] = {}

    @property
    def running(self) -> bool:
        return self._set is not None

    async def follow(
        self, conn: UpstreamConnection, client: ClientConnection, pass_on: Pass, silence: float
    ) -> Handback:
        """Relay ``conn``'s stream to ``client`` until it goes back to this task.

        ``silence``: the longest wait for the lane's next bytes (each read moves
        ``conn``'s deadline on by it). Raises what the relay met (a read's ``OSError``,
        the proxy's ``Abort``) or the interruption of ``conn``'s wait (``ClientGone``,
        ``Expired``).
        """
        await in_own_task()  # the stream's task parks here, not the server's
        conn.raise_interruption()
        assert self._set is not None
        stream = _Stream(self, conn, client, pass_on, silence)
        self._set.register(stream.fd, _EDGE)  # reports data already there at once
        self._streams[stream.fd] = stream
        conn.waiting_on = stream

        def abort(_: object) -> trio.lowlevel.Abort:
            self.leave(stream)
            conn.waiting_on = None
            return trio.lowlevel.Abort.SUCCEEDED

        handback: Handback = await trio.lowlevel.wait_task_rescheduled(abort)
        conn.raise_interruption()
        return handback

    def leave(self, stream: _Stream) -> None:
        """Take ``stream`` out of the set (its socket is still open: its task closes it)."""
        if self._streams.get(stream.fd) is stream:
            del self._streams[stream.fd]
            if self._set is not None:
                self._set.unregister(stream.fd)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Relay until cancelled; ``started`` once :meth:`follow` may be called."""
        with select.epoll() as streams_set:
            self._set = streams_set
            try:
                task_status.started()
                while True:
                    await trio.lowlevel.wait_readable(streams_set)
                    for fd, _events in streams_set.poll(0):
                        stream = self._streams.get(fd)
                        if stream is not None:
                            stream.ready()
            finally:
                self._set = None
                for stream in list(self._streams.values()):
                    stream.hand_back(outcome.Value(Handback.READ))
