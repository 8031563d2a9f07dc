"""The endpoint's hang-up watch (``_hangups``) and the lane connections it interrupts.

The end-to-end behaviour (a hang-up ends the lane's request) is pinned over real
sockets in ``test_endpoint_http.py`` and ``test_endpoint_fast_path.py``; these tests pin
the cases that timing makes rare there: a hang-up between two waits of a request, and
one that comes after the connection's last wait.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
import trio

from ddsup.endpoint._connection import ClientGone, Hangup
from ddsup.endpoint._deadlines import Deadlines
from ddsup.endpoint._hangups import Hangups
from ddsup.endpoint._upstream import UpstreamConnection
from ddsup.endpoint._wire import Wire

ANSWER = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"


@pytest.fixture
def lane() -> Iterator[tuple[UpstreamConnection, socket.socket]]:
    """A lane connection (the endpoint's end) and the lane's end of it."""
    ours, theirs = socket.socketpair()
    conn = UpstreamConnection(Wire(ours))
    with ours, theirs:  # closed outside trio: no waiter to notify
        yield conn, theirs


async def exchange(conn: UpstreamConnection, lane_end: socket.socket) -> int:
    """One request and answer on ``conn``: the status."""
    await conn.send(b"GET / HTTP/1.1\r\nhost: lane\r\n\r\n")
    lane_end.recv(1024)
    lane_end.send(ANSWER)
    head = await conn.read_head()
    assert conn.buffered() == b"ok"
    return head.status


async def test_a_hang_up_after_the_last_wait_does_not_reach_the_next_user(
    lane: tuple[UpstreamConnection, socket.socket],
) -> None:
    conn, lane_end = lane
    hangup = Hangup()
    conn.checkout(Deadlines(5.0), hangup)
    assert await exchange(conn, lane_end) == 200
    hangup.hung_up()  # the client left once its answer was in: nothing to interrupt
    conn.checkin()
    assert hangup.serving is None
    assert await exchange(conn, lane_end) == 200  # a control read (no checkout) after it
    conn.checkout(Deadlines(5.0), Hangup())
    assert await exchange(conn, lane_end) == 200  # another client's request


async def test_a_client_gone_before_its_request_is_not_waited_for(
    lane: tuple[UpstreamConnection, socket.socket],
) -> None:
    conn, _lane_end = lane
    hangup = Hangup()
    hangup.hung_up()
    conn.checkout(Deadlines(5.0), hangup)
    with trio.fail_after(5), pytest.raises(ClientGone):
        await conn.read_head()


async def test_the_watch_interrupts_the_wait_for_the_lane(
    lane: tuple[UpstreamConnection, socket.socket],
) -> None:
    conn, _lane_end = lane
    hangups = Hangups()
    client, peer = socket.socketpair()
    with client, peer:
        async with trio.open_nursery() as nursery:
            await nursery.start(hangups.run)
            hangup = Hangup()
            hangups.add(client.fileno(), hangup)
            conn.checkout(Deadlines(5.0), hangup)
            peer.send(b"GET / HTTP/1.1\r\n\r\n")  # bytes from the client are no hang-up
            nursery.start_soon(_close_when_blocked, peer)
            with trio.fail_after(5), pytest.raises(ClientGone):
                await conn.read_head()  # the lane never answers
            assert hangup.gone
            hangups.discard(client.fileno())
            nursery.cancel_scope.cancel()


async def _close_when_blocked(peer: socket.socket) -> None:
    await trio.testing.wait_all_tasks_blocked()
    peer.shutdown(socket.SHUT_WR)
