"""CPU of one HTTP readiness/liveness probe: ``http_status`` against the same request
over ``trio.open_tcp_stream`` (how it was spoken before), alternating, side by side.

    .venv/bin/python bench/probe_cost.py [--probes 200] [--rounds 5]

A ready lane is probed every ``liveness_interval`` (5 s) by its agent for as long as it
runs, so at 8 lanes per node this is most of an idle agent's CPU. The target is a
``busybox httpd`` on a free loopback port (the scale bench's lanes).
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable

import trio

from ddsup.service._readiness import http_status


async def over_stream(url: str) -> int | str:
    """The probe as it was: one ``GET`` over ``trio.open_tcp_stream``."""
    host, port = url.split("/")[2].split(":")
    stream = await trio.open_tcp_stream(host, int(port))
    async with stream:
        await stream.send_all(
            f"GET /health HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: ddsup-probe\r\n"
            "Accept: */*\r\nConnection: close\r\n\r\n".encode()
        )
        head = b""
        while b"\r\n" not in head:
            chunk = await stream.receive_some(4096)
            if not chunk:
                break
            head += chunk
    return int(head.split()[1])


async def cpu_per_probe(probe: Callable[[str], Awaitable[int | str]], url: str, n: int) -> float:
    began = time.process_time()
    for _ in range(n):
        answer = await probe(url)
        if answer != 200:
            raise SystemExit(f"bench: probe answered {answer!r}")
    return 1e6 * (time.process_time() - began) / n


async def compare(url: str, probes: int, rounds: int) -> None:
    kinds = {"open_tcp_stream (before)": over_stream, "http_status (now)": http_status}
    figures: dict[str, list[float]] = {name: [] for name in kinds}
    for _ in range(rounds):
        for name, probe in kinds.items():
            figures[name].append(await cpu_per_probe(probe, url, probes))
    for name, values in figures.items():
        spread = ", ".join(f"{v:.0f}" for v in values)
        print(f"{name:26} median {statistics.median(values):5.0f} µs CPU per probe ({spread})")
    print(f"load average {os.getloadavg()[0]:.2f}")


def listening(port: int) -> None:
    """Until the server accepts (bounded poll: busybox says nothing when it listens)."""
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--probes", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    busybox = shutil.which("busybox")
    if busybox is None:
        raise SystemExit("bench: needs busybox (apt-get install busybox)")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with tempfile.TemporaryDirectory() as docroot:
        with open(os.path.join(docroot, "health"), "w") as file:
            file.write("ok\n")
        argv = [busybox, "httpd", "-f", "-p", f"127.0.0.1:{port}", "-h", docroot]
        server = subprocess.Popen(argv)
        try:
            listening(port)
            trio.run(compare, f"http://127.0.0.1:{port}/health", args.probes, args.rounds)
        finally:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()
