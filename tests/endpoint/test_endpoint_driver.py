"""Fast-path coroutines stepped from one epoll set (``_driver``): what a connection relies on.

A driven coroutine must behave as if its own task ran it: every byte it waits for
arrives, its task's cancellation and its waits' interruptions reach it where it waits,
what it raises or returns comes out of ``drive``, and trio calls run in its own task.
And the point of it: its waits do not cost its task a turn of trio's run loop.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

import pytest
import trio
import trio.testing
from endpoint_fakes import TEST_CONFIG
from test_endpoint_fast_path import post

from ddsup.endpoint._body_budget import BodyBudget
from ddsup.endpoint._deadlines import Timed
from ddsup.endpoint._driver import Driver, in_own_task
from ddsup.endpoint._fast_client import FastClient
from ddsup.endpoint._wire import RECEIVE_SIZE, Wire


class _Waiter(Timed):
    __slots__ = ()


class _TaskSteps(trio.abc.Instrument):
    """Counts the run loop's steps of one task."""

    def __init__(self, task: trio.lowlevel.Task) -> None:
        self.task = task
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is self.task:
            self.steps += 1


@contextmanager
def _pair() -> Iterator[tuple[socket.socket, trio.socket.SocketType]]:
    """A connected pair: the driven side (plain, non-blocking) and the test's (trio)."""
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    peer = trio.socket.from_stdlib_socket(theirs)
    with ours, peer:
        yield ours, peer


@asynccontextmanager
async def _driver() -> AsyncIterator[tuple[Driver, socket.socket, trio.socket.SocketType]]:
    """A running driver, and a pair (:func:`_pair`)."""
    driver = Driver()
    with _pair() as (ours, peer):
        async with trio.open_nursery() as nursery:
            await nursery.start(driver.run)
            yield driver, ours, peer
            nursery.cancel_scope.cancel()


async def _read(waiter: Timed, sock: socket.socket) -> bytes:
    while True:
        try:
            return sock.recv(4096)
        except BlockingIOError:
            await waiter.wait_readable(sock)


async def test_waits_are_stepped_by_the_server_task_without_a_turn_of_their_own() -> None:
    async with _driver() as (driver, ours, peer):

        async def echo(rounds: int) -> int:
            waiter = _Waiter()
            for _ in range(rounds):
                ours.send(await _read(waiter, ours))
            return rounds

        steps = _TaskSteps(trio.lowlevel.current_task())
        trio.lowlevel.add_instrument(steps)
        try:
            async with trio.open_nursery() as nursery:
                results: list[int] = []

                async def client() -> None:
                    for i in range(200):
                        await peer.send(b"ping %d" % i)
                        assert await peer.recv(100) == b"ping %d" % i

                nursery.start_soon(client)
                results.append(await driver.drive(echo(200)))
        finally:
            trio.lowlevel.remove_instrument(steps)
        assert results == [200]
        # 200 waits, each a turn of this task's own as a plain trio wait; here a few
        assert steps.steps < 20, steps.steps


async def test_bytes_that_come_while_nothing_waits_are_not_lost() -> None:
    async with _driver() as (driver, ours, peer):
        busy = trio.Event()
        resume = trio.Event()

        async def two_messages() -> list[bytes]:
            waiter = _Waiter()
            first = await _read(waiter, ours)  # all there was: a wait may come first now
            await in_own_task()
            busy.set()
            await resume.wait()  # the next bytes come meanwhile, seen by the driver
            await waiter.wait_readable(ours)
            return [first, ours.recv(4096)]

        got: list[list[bytes]] = []

        async def run() -> None:
            got.append(await driver.drive(two_messages()))

        with trio.fail_after(5):  # lost bytes: the second wait would never end
            async with trio.open_nursery() as nursery:
                nursery.start_soon(run)
                await trio.testing.wait_all_tasks_blocked()  # parked on the socket
                await peer.send(b"one")
                await busy.wait()
                await peer.send(b"two")
                await trio.testing.wait_all_tasks_blocked()  # the driver saw it, none waiting
                resume.set()
        assert got == [[b"one", b"two"]]


async def test_cancelling_the_task_reaches_the_coroutine_where_it_waits() -> None:
    async with _driver() as (driver, ours, peer):
        cleaned = []

        async def wait_forever() -> None:
            try:
                await _read(_Waiter(), ours)
            finally:
                cleaned.append(True)

        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(driver.drive, wait_forever())
                await trio.testing.wait_all_tasks_blocked()
                scope.cancel()
        assert scope.cancelled_caught
        assert cleaned == [True]
        await peer.send(b"late")  # the driver lives on without the parked wait


async def test_an_interruption_is_raised_from_the_parked_wait() -> None:
    async with _driver() as (driver, ours, _peer):
        waiter = _Waiter()
        raised: list[BaseException] = []

        async def run() -> None:
            try:
                await driver.drive(_read(waiter, ours))
            except TimeoutError as err:
                raised.append(err)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            await trio.testing.wait_all_tasks_blocked()
            assert waiter.waiting_on is not None
            waiter.interrupt(TimeoutError("deadline"))
        assert [str(err) for err in raised] == ["deadline"]
        assert waiter.waiting_on is None


async def _send_when_parked(peer: trio.socket.SocketType, data: bytes) -> None:
    await trio.testing.wait_all_tasks_blocked()
    await peer.send(data)


async def test_what_it_raises_or_returns_comes_out_of_drive() -> None:
    async with _driver() as (driver, ours, peer):
        waiter = _Waiter()

        async def fail() -> None:
            await _read(waiter, ours)
            raise LookupError("from the server's step")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(_send_when_parked, peer, b"x")
            assert await driver.drive(_read(waiter, ours)) == b"x"
        raised: list[BaseException] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_send_when_parked, peer, b"y")
            try:
                await driver.drive(fail())
            except LookupError as err:
                raised.append(err)
        assert [str(err) for err in raised] == ["from the server's step"]


async def test_trio_calls_after_in_own_task_run_in_the_coroutines_own_task() -> None:
    async with _driver() as (driver, ours, peer):
        seen: dict[str, trio.lowlevel.Task] = {}

        async def where() -> None:
            await _read(_Waiter(), ours)
            seen["stepped"] = trio.lowlevel.current_task()
            await in_own_task()
            seen["own"] = trio.lowlevel.current_task()
            with trio.move_on_after(0):  # a cancel scope: its task must be the right one
                await trio.sleep_forever()

        own = trio.lowlevel.current_task()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_send_when_parked, peer, b"x")
            await driver.drive(where())
        assert seen["own"] is own
        assert seen["stepped"] is not own  # why in_own_task exists


async def test_a_trio_call_without_in_own_task_is_logged_as_a_bug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with _driver() as (driver, ours, peer):

        async def careless() -> str:
            await _read(_Waiter(), ours)
            await trio.lowlevel.cancel_shielded_checkpoint()  # yielded in the server's task
            return "still served"

        async with trio.open_nursery() as nursery:
            nursery.start_soon(_send_when_parked, peer, b"x")
            with caplog.at_level(logging.ERROR, logger="ddsup.endpoint"):
                assert await driver.drive(careless()) == "still served"
        assert "bug: a trio call stepped by the server's task" in caplog.text


async def test_when_the_driver_stops_parked_waits_go_on_as_plain_trio_waits() -> None:
    driver = Driver()
    with _pair() as (ours, peer):
        async with trio.open_nursery() as outer:
            got: list[bytes] = []

            async def run() -> None:
                got.append(await driver.drive(_read(_Waiter(), ours)))

            async with trio.open_nursery() as nursery:
                await nursery.start(driver.run)
                outer.start_soon(run)
                await trio.testing.wait_all_tasks_blocked()
                nursery.cancel_scope.cancel()
            assert not driver.running
            await peer.send(b"after")
        assert got == [b"after"]


async def test_a_request_read_whole_with_the_one_before_is_answered() -> None:
    """The read of a request filled its buffer: the next one, which came with it, must be
    read before any wait (an edge-triggered set does not report those bytes again)."""
    ours, theirs = socket.socketpair()  # a stream without a window: all of it arrives at once
    client = FastClient(Wire(ours), TEST_CONFIG)
    peer = trio.socket.from_stdlib_socket(theirs)
    driver = Driver()
    bodies = BodyBudget(1 << 30)

    async def serve(requests: int) -> list[int]:
        sizes = []
        for _ in range(requests):
            request = await client.read_head()
            assert request is not None
            sizes.append(len(await client.read_body(request, 1 << 20, bodies.account(str))))
            await client.respond(200, [], b"ok")
        return sizes

    async def answers(count: int) -> None:
        received = b""
        while received.count(b"ok") < count:
            received += await peer.recv(65536)

    with ours, peer:
        async with trio.open_nursery() as nursery:
            await nursery.start(driver.run)
            served: list[list[int]] = []

            async def run() -> None:
                served.append(await driver.drive(serve(3)))

            nursery.start_soon(run)
            await peer.send(post(b"{}"))
            await answers(1)  # the connection now waits in the driver's set
            exact = _request_of_size(RECEIVE_SIZE)
            assert await peer.send(exact + post(b"{}")) == len(exact) + len(post(b"{}"))
            with trio.fail_after(5):
                await answers(2)
            nursery.cancel_scope.cancel()
    assert served == [[2, len(exact) - exact.index(b"\r\n\r\n") - 4, 2]]


def _request_of_size(size: int) -> bytes:
    filler = b'{"model":"m","prompt":"%s"}'
    pad = size - len(post(filler % b""))
    while len(request := post(filler % (b"x" * pad))) != size:
        pad -= len(request) - size
    return request
