"""Relaying streamed answers (SSE) to fast-path clients without a task switch per event.

A streamed answer arrives as many small reads: one per token or batch of tokens, each
passed on to the client as it came (:mod:`._proxy`). Done by the request's task, each
read costs a trio wait and wake of that task: the lane's socket is registered again
(``EPOLLONESHOT``: one ``epoll_ctl``), the task is rescheduled and its coroutine chain
resumed. Side by side (``bench/endpoint_compare.py``, ``floor proxy tasks`` and ``floor
proxy epoll``), a bare trio proxy built that way spends clearly more per event than one
that relays from callbacks off a single edge-triggered epoll set, as nginx does.

So, once an answer turns out to be a stream, the request's coroutine waits here
(:meth:`StreamRelay.follow`) and the server's driver (:mod:`._driver`) relays for
every such stream: the lane's socket stays in the driver's edge-triggered set (where
the wait for the answer's head put it; re-armed once per stream, never per event), and
for each readable lane the driver calls the stream's :meth:`~_Stream.ready`, which
reads, passes the bytes on through the proxy's own
:meth:`~ddsup.endpoint._proxy.Proxy._pass_buffered` (the same framing, checks and
series hook as in the request's code) and writes them to the client. Every read
refreshes the silence deadline, as the request's loop does.

Anything but that happy path gives the stream back to the request's coroutine (stepped
on at once by the driver, or, for an interruption, by its own task), which then goes on
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
  which gives the stream back to its task, and the wait raises
  :class:`~ddsup.endpoint._connection.ClientGone` or
  :class:`~ddsup.endpoint._deadlines.Expired`;
- the task was cancelled (the server stops): the stream ends with the wait.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable

import outcome

from ddsup.endpoint._connection import ClientConnection
from ddsup.endpoint._driver import STEPPING, Driver, Watcher, WatchWait
from ddsup.endpoint._upstream import UpstreamConnection
from ddsup.endpoint._wire import RECEIVE_SIZE


class Handback(enum.Enum):
    """Why a stream went back to its request's code (see the module docstring)."""

    DONE = "the body ended; its last bytes are queued"
    FLUSH = "the client did not take the bytes whole"
    READ = "the request's code reads the lane itself"


Pass = Callable[[], bool]  # queue what the lane sent for the client; True at the body's end


class _Stream(Watcher):
    """One stream in the relay: its lane connection and its client."""

    __slots__ = ("client", "conn", "pass_on", "silence")

    def __init__(
        self, conn: UpstreamConnection, client: ClientConnection, pass_on: Pass, silence: float
    ) -> None:
        super().__init__()
        self.conn = conn
        self.client = client
        self.pass_on = pass_on
        self.silence = silence

    def wake(self) -> None:
        """An interruption (hang-up, deadline): back to its task, which raises it."""
        self.resume(outcome.Value(Handback.READ), inline=False)

    def hand_back(self, result: outcome.Outcome[Handback]) -> None:
        self.resume(result, inline=True)

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
            self.hand_back(outcome.Value(Handback.READ))  # EOF: the code reads it again
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
    """The streams of one server's fast-path clients, relayed by its driver."""

    def __init__(self, driver: Driver) -> None:
        self.driver = driver

    @property
    def running(self) -> bool:
        return self.driver.running

    async def follow(
        self, conn: UpstreamConnection, client: ClientConnection, pass_on: Pass, silence: float
    ) -> Handback:
        """Relay ``conn``'s stream to ``client`` until it comes back to this coroutine.

        ``silence``: the longest wait for the lane's next bytes (each read moves
        ``conn``'s deadline on by it). Raises what the relay met (a read's ``OSError``,
        the proxy's ``Abort``) or the interruption of ``conn``'s wait (``ClientGone``,
        ``Expired``). Not driven (the driver has stopped): the coroutine reads itself.
        """
        conn.raise_interruption()
        if not STEPPING.by:
            return Handback.READ
        stream = _Stream(conn, client, pass_on, silence)
        handback: Handback | None = await WatchWait(conn.wire.sock, conn, stream)
        conn.raise_interruption()
        return Handback.READ if handback is None else handback
