"""Measure what the endpoint costs: direct-to-lane versus through the endpoint.

Starts a minimal upstream lane (a hand-rolled HTTP/1.1 server: the bench measures the
endpoint, so the lane must be as cheap as possible), the endpoint (``ddsup endpoint``)
pinned to one core, and wrk on the other cores, for a bounded time per scenario.
Prints, per scenario: requests/s, p50/p99 latency, and the endpoint's CPU time
(user + system, from psutil) per request and per SSE event.

    python bench/endpoint_proxy.py [--seconds 5] [--connections 32] [--events 50]

Needs ``wrk`` (Debian: ``apt-get install -y wrk``).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

JSON_BODY = b'{"id":"cmpl-1","object":"text_completion","model":"m","choices":[{"index":0,"text":"hello world","finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}'


def serve_upstream(port_file: str, events: int, gap: float) -> None:
    """The bench lane: answers JSON, or ``events`` SSE events (``gap`` s apart) when streaming."""
    import selectors

    listener = socket.create_server(("127.0.0.1", 0), backlog=1024)
    listener.setblocking(False)
    Path(port_file).write_text(str(listener.getsockname()[1]))
    plain = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
        len(JSON_BODY),
        JSON_BODY,
    )
    sse_head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    event = b'data: {"choices":[{"text":"tok"}]}\n\n'
    sse_chunk = b"%x\r\n%s\r\n" % (len(event), event)
    sse_end = b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    buffers: dict[socket.socket, bytes] = {}
    streams: list[tuple[float, socket.socket, int]] = []  # (due, conn, events left)
    while True:
        timeout = max(0.0, streams[0][0] - time.monotonic()) if streams else None
        for key, _ in sel.select(timeout):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            if sock is listener:
                try:
                    conn, _ = listener.accept()
                except BlockingIOError:
                    continue
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sel.register(conn, selectors.EVENT_READ)
                buffers[conn] = b""
                continue
            try:
                data = sock.recv(65536)
            except OSError:
                data = b""
            if not data:
                sel.unregister(sock)
                buffers.pop(sock, None)
                sock.close()
                continue
            buf = buffers[sock] + data
            while (end := buf.find(b"\r\n\r\n")) >= 0:
                head = buf[:end].lower()
                match = re.search(rb"content-length:\s*(\d+)", head)
                length = int(match.group(1)) if match else 0
                if len(buf) < end + 4 + length:
                    break
                body = buf[end + 4 : end + 4 + length]
                buf = buf[end + 4 + length :]
                if b'"stream":true' in body.replace(b" ", b""):
                    sock.sendall(sse_head)
                    streams.append((time.monotonic() + gap, sock, events))
                    streams.sort(key=lambda s: s[0])
                else:
                    sock.sendall(plain)
            buffers[sock] = buf
        now = time.monotonic()
        while streams and streams[0][0] <= now:
            _, sock, left = streams.pop(0)
            try:
                sock.sendall(sse_chunk if left > 1 else sse_chunk + sse_end)
            except OSError:
                continue
            if left > 1:
                streams.append((now + gap, sock, left - 1))
                streams.sort(key=lambda s: s[0])


@dataclass(frozen=True)
class Result:
    name: str
    requests: int
    seconds: float
    p50_ms: float
    p99_ms: float
    cpu_s: float | None

    @property
    def rps(self) -> float:
        return self.requests / self.seconds


def wrk(
    url: str, body: str, seconds: int, connections: int, cpus: set[int]
) -> tuple[int, float, float, float]:
    script = tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False)
    script.write(
        'wrk.method = "POST"\n'
        f"wrk.body = '{body}'\n"
        'wrk.headers["Content-Type"] = "application/json"\n'
    )
    script.close()
    argv = [
        "wrk",
        "-t",
        "1",
        "-c",
        str(connections),
        "-d",
        f"{seconds}s",
        "--latency",
        "-s",
        script.name,
        url,
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    os.sched_setaffinity(proc.pid, cpus)
    out, _ = proc.communicate()
    os.unlink(script.name)
    requests = int(re.search(r"(\d+) requests in ([\d.]+)(\w+)", out).group(1))  # type: ignore[union-attr]
    took = _seconds(re.search(r"\d+ requests in ([\d.]+\w+)", out).group(1))  # type: ignore[union-attr]
    p50 = _ms(re.search(r"50%\s+([\d.]+\w+)", out).group(1))  # type: ignore[union-attr]
    p99 = _ms(re.search(r"99%\s+([\d.]+\w+)", out).group(1))  # type: ignore[union-attr]
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors or "Socket errors" in out:
        print(out, file=sys.stderr)
    return requests, took, p50, p99


def _ms(text: str) -> float:
    value, unit = re.match(r"([\d.]+)(\w+)", text).groups()  # type: ignore[union-attr]
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}[unit]


def _seconds(text: str) -> float:
    return _ms(text) / 1000.0


def start(argv: list[str], cpus: set[int]) -> subprocess.Popen[str]:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    os.sched_setaffinity(proc.pid, cpus)
    return proc


def wait_port(port_file: Path) -> int:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if port_file.exists() and port_file.read_text():
            return int(port_file.read_text())
        time.sleep(0.05)  # a child process writes it: bounded poll
    raise SystemExit("the upstream did not start")


def run(args: argparse.Namespace) -> list[Result]:
    cpus = sorted(os.sched_getaffinity(0))
    endpoint_cpu, others = {cpus[0]}, set(cpus[1:]) or {cpus[0]}
    tmp = Path(tempfile.mkdtemp())
    port_file = tmp / "port"
    me = [sys.executable, __file__, "--upstream", str(port_file)]
    upstream = start([*me, "--events", str(args.events), "--gap", str(args.gap)], others)
    endpoint: subprocess.Popen[str] | None = None
    try:
        lane = f"http://127.0.0.1:{wait_port(port_file)}"
        endpoint = start(
            [sys.executable, "-m", "ddsup", "endpoint", "--port", "0", "--lane", f"m={lane}"],
            endpoint_cpu,
        )
        assert endpoint.stdout is not None
        url = endpoint.stdout.readline().split()[-1]
        proc = psutil.Process(endpoint.pid)
        results = []
        plain = '{"model":"m","prompt":"hi","max_tokens":16}'
        stream = '{"model":"m","prompt":"hi","stream":true}'
        for name, base, body, measured in (
            ("direct", lane, plain, False),
            ("endpoint", url, plain, True),
            ("direct SSE", lane, stream, False),
            ("endpoint SSE", url, stream, True),
        ):
            wrk(f"{base}/v1/completions", body, 1, args.connections, others)  # warm-up
            before = sum(proc.cpu_times()[:2])
            n, took, p50, p99 = wrk(
                f"{base}/v1/completions", body, args.seconds, args.connections, others
            )
            cpu = sum(proc.cpu_times()[:2]) - before if measured else None
            results.append(Result(name, n, took, p50, p99, cpu))
        return results
    finally:
        for child in (endpoint, upstream):
            if child is not None:
                child.terminate()
                try:
                    child.wait(10)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def report(results: list[Result], events: int) -> None:
    by = {r.name: r for r in results}
    print(
        f"{'scenario':<14}{'req/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'+p50 ms':>9}{'+p99 ms':>9}{'CPU µs/req':>12}{'CPU µs/event':>14}"
    )
    for r in results:
        direct = by["direct SSE" if "SSE" in r.name else "direct"]
        added = r is not direct
        per_req = f"{r.cpu_s / r.requests * 1e6:.0f}" if r.cpu_s is not None else "-"
        per_event = "-"
        if r.cpu_s is not None and "SSE" in r.name:
            per_event = f"{r.cpu_s / (r.requests * events) * 1e6:.1f}"
        print(
            f"{r.name:<14}{r.rps:>10.0f}{r.p50_ms:>9.2f}{r.p99_ms:>9.2f}"
            f"{(r.p50_ms - direct.p50_ms) if added else 0:>9.2f}{(r.p99_ms - direct.p99_ms) if added else 0:>9.2f}"
            f"{per_req:>12}{per_event:>14}"
        )
    print(f"(SSE: {events} events per request; CPU is the endpoint process's user+system time)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--events", type=int, default=50, help="SSE events per streamed request")
    parser.add_argument("--gap", type=float, default=0.001, help="seconds between SSE events")
    parser.add_argument("--upstream", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.upstream:
        serve_upstream(args.upstream, args.events, args.gap)
        return
    if not shutil.which("wrk"):
        raise SystemExit("wrk is needed: apt-get install -y wrk")
    report(run(args), args.events)


if __name__ == "__main__":
    main()
