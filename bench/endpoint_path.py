"""CPU of the endpoint's request path alone, and of one trio wait, in one process.

Where a proxied request's CPU goes, apart from the kernel and the load generator:

- **path**: the endpoint's fast path (``FastClient`` → routes → proxy → upstream) driven
  in-process over socketpairs whose bytes are all there before they are asked for:
  parsing, JSON, lane choice, shared counts, metrics, framing, the socket calls
  themselves (tiny, on Unix socketpairs), and two trio waits that return at once (the
  path waits for a kept-alive client's next request and for the lane's answer before it
  reads them, since in real use neither is ever there yet; from the first request on).
  Plain JSON, then SSE with ``--events`` events in one read.
- **wait**: two trio tasks playing ping-pong over socketpairs: the cost of a trio
  wait-and-wake plus its socket calls (a proxied request makes at least two).
- **parsers**: one typical request head (with its small body) parsed by httptools, by a
  minimal regular-expression parser, and by h11: why the fast path uses httptools.

Prints process CPU per request (minimum and median of ``--runs``), and, with
``--profile``, the top functions of one run under cProfile. With ``--opcodes``, the
Python bytecodes executed per request (plain and SSE) and the modules that run most of
them: a count, not a time, so it does not move with the machine's load, and two trees
compare exactly (``PYTHONPATH=<other tree>/supervisor`` runs another one's endpoint);
it misses work done in C (parsers, regular expressions, coroutine creation).

    .venv/bin/python bench/endpoint_path.py [--requests 5000] [--runs 7] [--profile] [--opcodes]
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import pstats
import re
import socket
import statistics
import sys
import time
import types
from typing import Any

import h11
import httptools
import trio

from ddsup.endpoint import LaneInfo, LaneTable
from ddsup.endpoint._config import EndpointConfig
from ddsup.endpoint._fast_client import FastClient
from ddsup.endpoint._routes import Endpoint, handle_request
from ddsup.endpoint._upstream import UpstreamConnection
from ddsup.endpoint._wire import Wire

BODY = b'{"model":"m","prompt":"hi","max_tokens":16}'
STREAM_BODY = b'{"model":"m","prompt":"hi","stream":true}'
ANSWER = (
    b'{"id":"cmpl-1","object":"text_completion","model":"m","choices":[{"index":0,'
    b'"text":"hello world","finish_reason":"stop"}],"usage":{"prompt_tokens":1,'
    b'"completion_tokens":2,"total_tokens":3}}'
)
EVENT = b'data: {"choices":[{"text":"tok"}]}\n\n'


def request(body: bytes) -> bytes:
    head = b"POST /v1/completions HTTP/1.1\r\nhost: 127.0.0.1:9000\r\n"
    head += b"content-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body)
    return head + body


def answer(events: int) -> bytes:
    if not events:
        head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
        return head + b"content-length: %d\r\n\r\n%s" % (len(ANSWER), ANSWER)
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
    head += b"transfer-encoding: chunked\r\n\r\n"
    return head + b"%x\r\n%s\r\n" % (len(EVENT), EVENT) * events + b"0\r\n\r\n"


async def path(count: int, events: int) -> float:
    """CPU µs per request of ``count`` requests through the fast path."""
    config = EndpointConfig()
    table = LaneTable([LaneInfo("lane", "m", "http://127.0.0.1:1")])
    endpoint = Endpoint(config, table)
    ours, client_end = socket.socketpair()
    upstream_end, lane_end = socket.socketpair()
    for sock in (client_end, lane_end):
        sock.setblocking(False)
    pool = table.ready("m")[0].pool
    pool._idle[UpstreamConnection(Wire(upstream_end))] = None  # a kept connection to the lane
    client = FastClient(Wire(ours), config)
    sent, answered = request(STREAM_BODY if events else BODY), answer(events)
    start = time.process_time()
    for i in range(count):
        client_end.send(sent)
        lane_end.send(answered)
        head = await client.read_head()
        assert head is not None  # the bench sent a whole request
        await handle_request(endpoint, client, head)
        if i % 16 == 0:
            for sock in (client_end, lane_end):  # drain what the endpoint wrote
                while True:
                    try:
                        if not sock.recv(1 << 20):
                            break
                    except BlockingIOError:
                        break
    return (time.process_time() - start) / count * 1e6


async def ping_pong(count: int) -> float:
    """CPU µs per round trip of two trio tasks waking each other over socketpairs."""
    a, b = socket.socketpair()
    c, d = socket.socketpair()
    for sock in (a, b, c, d):
        sock.setblocking(False)

    async def recv(sock: socket.socket) -> None:
        while True:
            try:
                sock.recv(100)
                return
            except BlockingIOError:
                await trio.lowlevel.wait_readable(sock)

    async def echo() -> None:
        for _ in range(count):
            await recv(b)
            c.send(b"y")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(echo)
        start = time.process_time()
        for _ in range(count):
            a.send(b"x")
            await recv(d)
        elapsed = time.process_time() - start
    return elapsed / count * 1e6


HEAD = (
    b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:9000\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\nUser-Agent: python-httpx/0.27\r\nAccept: */*\r\n"
    b"Accept-Encoding: gzip, deflate\r\nConnection: keep-alive\r\n\r\n%s" % (len(BODY), BODY)
)
_LINE = re.compile(rb"([A-Z]+) (\S+) HTTP/1\.1")
_FIELD = re.compile(
    rb"([-!#$%&'*+.^_`|~0-9a-zA-Z]+):[ \t]*"
    rb"([\x21-\x7e\x80-\xff](?:[\t\x20-\x7e\x80-\xff]*[\x21-\x7e\x80-\xff])?)?[ \t]*"
)


class _Callbacks:
    def __init__(self) -> None:
        self.headers: list[tuple[bytes, bytes]] = []

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))


def parsers(count: int) -> dict[str, float]:
    """µs per parse of :data:`HEAD` (head and body) by each parser."""
    callbacks = _Callbacks()
    parser = httptools.HttpRequestParser(callbacks)

    def with_httptools() -> None:
        callbacks.headers = []
        parser.feed_data(HEAD)

    def with_regexes() -> None:
        end = HEAD.find(b"\r\n\r\n")
        line, *fields = HEAD[:end].split(b"\r\n")
        if _LINE.fullmatch(line) is None:
            raise ValueError(line)
        for field in fields:
            match = _FIELD.fullmatch(field)
            if match is None:
                raise ValueError(field)

    def with_h11() -> None:
        conn = h11.Connection(h11.SERVER)
        conn.receive_data(HEAD)
        while type(conn.next_event()) is not h11.EndOfMessage:
            pass

    out = {}
    for name, parse in (
        ("httptools", with_httptools),
        ("regexes", with_regexes),
        ("h11", with_h11),
    ):
        start = time.process_time()
        for _ in range(count):
            parse()
        out[name] = (time.process_time() - start) / count * 1e6
    return out


def opcodes(count: int, events: int) -> tuple[float, collections.Counter[str]]:
    """Python bytecodes executed per request through the path, and per module."""
    by_file: collections.Counter[str] = collections.Counter()

    def trace(frame: types.FrameType, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        if event == "opcode":
            by_file[frame.f_code.co_filename] += 1
        return trace

    sys.settrace(trace)
    try:
        trio.run(path, count, events)
    finally:
        sys.settrace(None)
    return sum(by_file.values()) / count, by_file


def print_opcodes(count: int, events: int) -> None:
    per_request, by_file = opcodes(count, events)
    label = f"SSE ({events} events in one read)" if events else "plain"
    print(f"bytecodes per request, {label}: {per_request:.0f}")
    for name, n in by_file.most_common(8):
        short = name.split("site-packages/")[-1].split("supervisor/")[-1]
        print(f"  {n / count:6.0f}  {short}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--events", type=int, default=20)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--opcodes", action="store_true", help="bytecodes per request")
    args = parser.parse_args()
    trio.run(path, 1000, 0)  # warm-up: imports, pools, caches
    if args.opcodes:
        trio.run(path, 1000, args.events)
        for events in (0, args.events):
            print_opcodes(min(args.requests, 2000), events)
        return
    for label, fn, extra in (
        ("plain request through the path", path, (0,)),
        (f"SSE request ({args.events} events in one read)", path, (args.events,)),
        ("trio ping-pong round trip (2 waits)", ping_pong, ()),
    ):
        runs = [trio.run(fn, args.requests, *extra) for _ in range(args.runs)]
        print(f"{label:<44} min {min(runs):6.1f} µs  median {statistics.median(runs):6.1f} µs")
    costs = parsers(args.requests * 4)
    print("one request head parsed: " + ", ".join(f"{k} {v:.1f} µs" for k, v in costs.items()))
    if args.profile:
        profile = cProfile.Profile()
        profile.enable()
        trio.run(path, args.requests, 0)
        profile.disable()
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
