"""Four bare proxies on trio, alternating in one run: what each way of waiting costs.

``proxy_floors.py`` has two floors: ``tasks`` (a task per connection, a trio wait per
socket wait: the endpoint's shape until its fourteenth stop) and ``epoll`` (callbacks
off one edge-triggered epoll set: nginx's shape). Two more sit between them, with the
tasks floor's code and only its waits changed:

- **edge**: each wait parks the task, and one task watching an edge-triggered set of
  every socket (registered once) reschedules it: no ``epoll_ctl`` per wait, but a turn
  of trio's run loop for the task each time.
- **stepped**: each wait yields a marker to the task's driver, and the set's task, when
  the socket is readable, sends into the connection's coroutine itself: no task switch
  per wait. What ``ddsup.endpoint._driver`` does for the endpoint's fast path.

Same lanes, pinning and wrk as ``endpoint_compare.py`` (the proxies on the first core,
wrk and the lanes on the others); prints each floor's median CPU per plain request with
every repetition's figure. About a minute and a half.

    .venv/bin/python bench/floor_designs.py [--reps 5] [--seconds 3]

Needs wrk (``apt-get install -y wrk``).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import select
import shutil
import socket
import statistics
import sys
import tempfile
import types
from collections.abc import Awaitable, Callable, Coroutine, Generator
from pathlib import Path
from typing import Any

import outcome
import psutil
from endpoint_compare import PLAIN, Child, Variant, measure, rotations, start
from endpoint_proxy import stop_all, wait_port
from proxy_floors import RECEIVE, _address, _Answer, _Head, _next_request

_EDGE = select.EPOLLIN | select.EPOLLET
Wait = Callable[[socket.socket], Awaitable[None]]


class _Marker:
    """What a stepped coroutine yields to wait until ``fd`` is readable."""

    __slots__ = ("fd",)

    def __init__(self, sock: socket.socket) -> None:
        self.fd = sock.fileno()

    def __await__(self) -> Generator[Any, Any, None]:
        yield self


@types.coroutine
def _forward(trap: object) -> Generator[Any, Any, Any]:
    return (yield trap)


async def _connection(client: socket.socket, lane: socket.socket, wait: Wait) -> None:
    """The tasks floor's loop: forward each request, relay its answer (plain sends)."""
    import httptools

    head = _Head()
    parser = httptools.HttpRequestParser(head)
    answer = _Answer()
    buf = b""

    async def recv(sock: socket.socket) -> bytes:
        while True:
            try:
                return sock.recv(RECEIVE)
            except BlockingIOError:
                await wait(sock)

    while True:
        size = _next_request(parser, head, buf)
        if not size:
            await wait(client)  # after an answer: wait first
            data = await recv(client)
            if not data:
                return
            buf += data
            continue
        lane.sendall(buf[:size])  # the bench's requests and answers fit a socket buffer
        buf = buf[size:]
        while True:
            data = await recv(lane)
            if not data:
                return
            client.sendall(data)
            if answer.feed(data):
                break


class _EdgeSet:
    """One edge-triggered set; ``edge`` or ``stepped`` waits (see the module docstring)."""

    def __init__(self) -> None:
        self.set = select.epoll()
        self.parked: dict[int, Any] = {}

    async def wait_edge(self, sock: socket.socket) -> None:
        import trio

        fd = sock.fileno()
        self.parked[fd] = trio.lowlevel.current_task()

        def abort(_: object) -> trio.lowlevel.Abort:
            self.parked.pop(fd, None)
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)

    async def wait_stepped(self, sock: socket.socket) -> None:
        await _Marker(sock)

    async def drive(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` in this task; the set's task steps it while its socket is ready."""
        import trio

        send: outcome.Outcome[Any] = outcome.Value(None)
        task = trio.lowlevel.current_task()
        while True:
            try:
                if isinstance(send, outcome.Error):
                    yielded = coro.throw(send.error)
                else:
                    yielded = coro.send(send.unwrap())
            except StopIteration:
                return
            while type(yielded) is _Marker:
                fd = yielded.fd
                self.parked[fd] = (coro, task)

                def abort(_: object, fd: int = fd) -> trio.lowlevel.Abort:
                    self.parked.pop(fd, None)
                    return trio.lowlevel.Abort.SUCCEEDED

                done, yielded = await trio.lowlevel.wait_task_rescheduled(abort)
                if done:
                    if isinstance(yielded, StopIteration):
                        return
                    raise yielded
            send = await outcome.acapture(_forward, yielded)

    def ready(self, fd: int) -> None:
        import trio

        parked = self.parked.pop(fd, None)
        if parked is None:
            return
        if not isinstance(parked, tuple):
            trio.lowlevel.reschedule(parked)
            return
        coro, task = parked
        while True:
            try:
                yielded = coro.send(None)
            except BaseException as exc:  # its end (StopIteration) or its error: the task's
                trio.lowlevel.reschedule(task, outcome.Value((True, exc)))
                return
            if type(yielded) is _Marker:
                self.parked[yielded.fd] = parked
                return
            trio.lowlevel.reschedule(task, outcome.Value((False, yielded)))
            return

    async def run(self) -> None:
        import trio

        while True:
            await trio.lowlevel.wait_readable(self.set)
            for fd, _ in self.set.poll(0):
                self.ready(fd)


def serve(kind: str, port_file: str, lanes: list[str]) -> None:
    """The ``edge`` or ``stepped`` floor (see the module docstring)."""
    import trio

    addresses = itertools.cycle([_address(lane) for lane in lanes])
    edges = _EdgeSet()
    wait = edges.wait_edge if kind == "edge" else edges.wait_stepped

    async def handle(stream: trio.SocketStream) -> None:
        client = stream.socket._sock  # type: ignore[attr-defined]  # the stdlib socket
        connection = trio.socket.socket()
        lane = connection._sock  # type: ignore[attr-defined]
        with connection, contextlib.suppress(OSError, trio.BrokenResourceError):
            await connection.connect(next(addresses))
            lane.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for sock in (client, lane):
                edges.set.register(sock.fileno(), _EDGE)
            try:
                if kind == "edge":
                    await _connection(client, lane, wait)
                else:
                    await edges.drive(_connection(client, lane, wait))
            finally:
                for sock in (client, lane):
                    edges.set.unregister(sock.fileno())

    async def main() -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        await trio.Path(port_file).write_text(str(listeners[0].socket.getsockname()[1]))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(edges.run)
            await trio.serve_listeners(handle, listeners)

    trio.run(main)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="alternating repetitions")
    parser.add_argument("--seconds", type=float, default=3, help="wrk time per repetition")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--serve", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        kind, port_file, *lanes = args.serve
        serve(kind, port_file, lanes)
        return
    if not shutil.which("wrk"):
        raise SystemExit("wrk is needed: apt-get install -y wrk")
    cpus = sorted(os.sched_getaffinity(0))
    proxy, load = {cpus[0]}, set(cpus[1:]) or {cpus[0]}
    here = Path(__file__).parent
    compare = [sys.executable, str(here / "endpoint_compare.py")]
    tmp = Path(tempfile.mkdtemp(prefix="ddsup-floors-"))
    children: list[Child] = []
    try:
        lanes = []
        for i in range(2):
            children.append(start([*compare, "--upstream", str(tmp / f"up{i}")], load))
            lanes.append(f"http://127.0.0.1:{wait_port(tmp / f'up{i}')}")
        floors = {
            "tasks": [*compare, "--floor-proxy", "tasks", str(tmp / "tasks"), *lanes],
            "edge": [sys.executable, __file__, "--serve", "edge", str(tmp / "edge"), *lanes],
            "stepped": [
                sys.executable,
                __file__,
                "--serve",
                "stepped",
                str(tmp / "stepped"),
                *lanes,
            ],
            "epoll": [*compare, "--floor-proxy", "epoll", str(tmp / "epoll"), *lanes],
        }
        variants = []
        for name, argv in floors.items():
            child = start(argv, proxy)
            children.append(child)
            url = f"http://127.0.0.1:{wait_port(tmp / name)}"
            variants.append(Variant(name, url, frozenset(proxy), (psutil.Process(child.pid),)))
        for v in variants:  # warm-up
            measure(v, PLAIN, 1, args.connections, load)
        samples: dict[str, list[float]] = {v.name: [] for v in variants}
        for order in rotations(variants, args.reps):
            for v in order:
                samples[v.name].append(
                    measure(v, PLAIN, args.seconds, args.connections, load).cpu_us
                )
    finally:
        stop_all(children)
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"plain, wrk -c {args.connections} -d {args.seconds:g}s × {args.reps} alternating")
    print(f"load average {os.getloadavg()[0]:.2f} at the end of the run")
    for name, cpu in samples.items():
        every = " ".join(f"{c:.1f}" for c in cpu)
        print(f"  floor {name:<8} CPU µs/req median {statistics.median(cpu):6.1f}  ({every})")


if __name__ == "__main__":
    main()
