"""How fast is ``ddsup fake-vllm``? It must never be the bottleneck of our benchmarks.

Starts ``python -m ddsup fake-vllm --port 0 --ttft 0 --tokens-per-second 0`` as a
subprocess, drives it over loopback with concurrent httpx clients (trio) for a bounded
time, and prints, for tiny non-streaming completions and for SSE streams: requests/s or
events/s, and the server's CPU time per request / per event (psutil), next to the
client's own CPU time (one Python client process is often the slower side). First it
prints the ASGI app's own CPU per request, called in memory: what the fake adds on top
of hypercorn's HTTP handling.

    .venv/bin/python bench/fake_vllm_throughput.py [--seconds 5] [--concurrency 32]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx
import psutil
import trio

LISTENING = b"fake-vllm listening on "


@dataclass(frozen=True)
class Result:
    name: str
    count: int
    seconds: float
    server_cpu: float
    client_cpu: float

    def line(self, unit: str) -> str:
        rate = self.count / self.seconds
        per_server = 1e6 * self.server_cpu / max(self.count, 1)
        per_client = 1e6 * self.client_cpu / max(self.count, 1)
        return (
            f"{self.name:<28} {rate:>9.0f} {unit}/s   server CPU {per_server:>7.0f} µs/{unit}"
            f"   client CPU {per_client:>7.0f} µs/{unit}   ({self.count} in {self.seconds:.1f}s)"
        )


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


async def _drive(
    url: str, server: psutil.Process, name: str, seconds: float, concurrency: int,
    one: Callable[[httpx.AsyncClient, str], Awaitable[int]],
) -> Result:  # fmt: skip
    """Run ``one`` in ``concurrency`` loops for ``seconds``; it returns what it counted."""
    me = psutil.Process()
    counted = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30) as client:
        await one(client, url)  # warm the connection pool's first connection

        async def loop() -> None:
            nonlocal counted
            while True:
                done = await one(client, url)  # not ``counted += await …``: that loses
                counted += done  # the increments of the loops that ran meanwhile

        server_before, client_before, start = _cpu(server), _cpu(me), time.monotonic()
        with trio.move_on_after(seconds):
            async with trio.open_nursery() as nursery:
                for _ in range(concurrency):
                    nursery.start_soon(loop)
        elapsed = time.monotonic() - start
        return Result(
            name, counted, elapsed, _cpu(server) - server_before, _cpu(me) - client_before
        )


async def _tiny(client: httpx.AsyncClient, url: str) -> int:
    response = await client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 1})
    response.raise_for_status()
    return 1


def _streaming(tokens: int) -> Callable[[httpx.AsyncClient, str], Awaitable[int]]:
    ask = {"prompt": "hi", "max_tokens": tokens, "stream": True}

    async def one(client: httpx.AsyncClient, url: str) -> int:
        events = 0
        async with client.stream("POST", "/v1/completions", json=ask) as response:
            async for line in response.aiter_lines():
                events += line.startswith("data: ")
        return events

    return one


class _OneRequest:
    """ASGI ``receive``/``send`` for one request in memory: the body once, then silence."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.delivered = False
        self.sends = 0

    async def receive(self) -> dict[str, object]:
        if self.delivered:
            await trio.sleep_forever()  # no disconnect: the client stays
        self.delivered = True
        return {"type": "http.request", "body": self.body, "more_body": False}

    async def send(self, message: dict[str, object]) -> None:
        self.sends += 1


async def _app_only(count: int) -> None:
    """The app's own CPU per request, without sockets or HTTP parsing (hypercorn's share)."""
    from ddsup.fake_vllm._app import FakeVllmApp
    from ddsup.fake_vllm._behaviour import Behaviour
    from ddsup.fake_vllm._engine import Engine

    behaviour = Behaviour()
    app = FakeVllmApp(behaviour, Engine(behaviour))
    app.bound(0)
    scope = {"type": "http", "method": "POST", "path": "/v1/completions"}
    tiny = b'{"prompt": "hi", "max_tokens": 1}'
    for name, body in (("app only, tiny", tiny), ("app only, SSE 64 tokens", _SSE_BODY)):
        sends = 0
        start = time.process_time()
        for _ in range(count):
            request = _OneRequest(body)
            await app(scope, request.receive, request.send)
            sends += request.sends
        cpu = time.process_time() - start
        print(f"{name:<28} {1e6 * cpu / count:>9.0f} µs CPU/request ({sends // count} sends each)")


_SSE_BODY = b'{"prompt": "hi", "max_tokens": 64, "stream": true}'


def _start_server() -> tuple[subprocess.Popen[bytes], str]:
    argv = [sys.executable, "-m", "ddsup", "fake-vllm", "--port", "0", "--ttft", "0"]
    argv += ["--tokens-per-second", "0", "--max-num-seqs", "100000"]
    server = subprocess.Popen(argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    assert server.stdout is not None
    line = server.stdout.readline()
    if not line.startswith(LISTENING):
        server.kill()
        raise SystemExit(f"fake-vllm did not start: {line!r}")
    return server, line[len(LISTENING) :].decode().strip()


async def _bench(url: str, pid: int, args: argparse.Namespace) -> None:
    server = psutil.Process(pid)
    tiny = await _drive(url, server, "tiny completions", args.seconds, args.concurrency, _tiny)
    print(tiny.line("req"), flush=True)
    stream = _streaming(args.stream_tokens)
    sse = await _drive(
        url,
        server,
        f"SSE, {args.stream_tokens} tokens/request",
        args.seconds,
        args.concurrency,
        stream,
    )
    print(sse.line("event"), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of each phase")
    parser.add_argument("--concurrency", type=int, default=32, help="concurrent clients")
    parser.add_argument("--stream-tokens", type=int, default=64, help="tokens per SSE request")
    args = parser.parse_args()
    trio.run(_app_only, 500)
    server, url = _start_server()
    print(f"fake-vllm at {url}, pid {server.pid}; {os.cpu_count()} CPUs; loopback", flush=True)
    try:
        trio.run(_bench, url, server.pid, args)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
