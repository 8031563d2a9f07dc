"""Measure what the endpoint costs: direct-to-lane versus through the endpoint.

Starts a minimal upstream lane (a hand-rolled HTTP/1.1 server: the bench measures the
endpoint, so the lane must be as cheap as possible), the endpoint (``ddsup endpoint``)
pinned to one core, a bare trio + h11 server on that same core as the calibration
floor, and wrk on the other cores, for a bounded time per scenario. Prints, per
scenario: requests/s, p50/p99 latency and what the endpoint adds to them, and the
serving process's CPU time (user + system, psutil) per request and per SSE event.

    python bench/endpoint_proxy.py [--seconds 5] [--connections 32] [--events 50]

Needs ``wrk`` (Debian: ``apt-get install -y wrk``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import selectors
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

JSON_BODY = (
    b'{"id":"cmpl-1","object":"text_completion","model":"m","choices":[{"index":0,'
    b'"text":"hello world","finish_reason":"stop"}],"usage":{"prompt_tokens":1,'
    b'"completion_tokens":2,"total_tokens":3}}'
)
EVENT = b'data: {"choices":[{"text":"tok"}]}\n\n'


class Upstream:
    """The bench lane: JSON, or ``events`` SSE events ``gap`` s apart when streaming."""

    def __init__(self, events: int, gap: float) -> None:
        self.events = events
        self.gap = gap
        self.plain = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
        self.plain += b"content-length: %d\r\n\r\n%s" % (len(JSON_BODY), JSON_BODY)
        self.sse_head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        self.sse_head += b"transfer-encoding: chunked\r\n\r\n"
        self.sse_chunk = b"%x\r\n%s\r\n" % (len(EVENT), EVENT)
        self.sse_end = b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"
        self.sel = selectors.DefaultSelector()
        self.buffers: dict[socket.socket, bytes] = {}
        self.streams: list[tuple[float, socket.socket, int]] = []  # (due, conn, events left)

    def serve(self, port_file: str) -> None:
        listener = socket.create_server(("127.0.0.1", 0), backlog=1024)
        listener.setblocking(False)
        Path(port_file).write_text(str(listener.getsockname()[1]))
        self.sel.register(listener, selectors.EVENT_READ)
        while True:
            timeout = max(0.0, self.streams[0][0] - time.monotonic()) if self.streams else None
            for key, _ in self.sel.select(timeout):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock is listener:
                    self._accept(listener)
                else:
                    self._read(sock)
            self._stream_due()

    def _accept(self, listener: socket.socket) -> None:
        try:
            conn, _ = listener.accept()
        except BlockingIOError:
            return
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sel.register(conn, selectors.EVENT_READ)
        self.buffers[conn] = b""

    def _read(self, sock: socket.socket) -> None:
        try:
            data = sock.recv(65536)
        except OSError:
            data = b""
        if not data:
            self.sel.unregister(sock)
            self.buffers.pop(sock, None)
            sock.close()
            return
        buf = self.buffers[sock] + data
        while (end := buf.find(b"\r\n\r\n")) >= 0:
            match = re.search(rb"content-length:\s*(\d+)", buf[:end].lower())
            length = int(match.group(1)) if match else 0
            if len(buf) < end + 4 + length:
                break
            body, buf = buf[end + 4 : end + 4 + length], buf[end + 4 + length :]
            if b'"stream":true' in body.replace(b" ", b""):
                sock.sendall(self.sse_head)
                self._schedule(time.monotonic() + self.gap, sock, self.events)
            else:
                sock.sendall(self.plain)
        self.buffers[sock] = buf

    def _schedule(self, due: float, sock: socket.socket, left: int) -> None:
        self.streams.append((due, sock, left))
        self.streams.sort(key=lambda s: s[0])

    def _stream_due(self) -> None:
        now = time.monotonic()
        while self.streams and self.streams[0][0] <= now:
            _, sock, left = self.streams.pop(0)
            try:
                sock.sendall(self.sse_chunk if left > 1 else self.sse_chunk + self.sse_end)
            except OSError:
                continue
            if left > 1:
                self._schedule(now + self.gap, sock, left - 1)


def serve_bare(port_file: str) -> None:
    """The floor: a bare trio + h11 server answering a fixed body (SPEC §5's reference)."""
    import h11
    import trio

    async def handle(stream: trio.SocketStream) -> None:
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await exchange(stream)  # wrk resets its connections at the end of a run

    async def exchange(stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        head = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(JSON_BODY))]
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await stream.receive_some(65536))
            elif isinstance(event, h11.EndOfMessage):
                data = conn.send(h11.Response(status_code=200, headers=head))
                data += conn.send(h11.Data(data=JSON_BODY)) + conn.send(h11.EndOfMessage())
                await stream.send_all(data)
                conn.start_next_cycle()
            elif isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
                return

    async def main() -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        await trio.Path(port_file).write_text(str(port))
        await trio.serve_listeners(handle, listeners)

    trio.run(main)


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

    @property
    def cpu_us(self) -> float | None:
        return None if self.cpu_s is None else self.cpu_s / self.requests * 1e6


def wrk(
    url: str, body: str, seconds: int, connections: int, cpus: set[int]
) -> tuple[int, float, float, float]:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(f"wrk.method = \"POST\"\nwrk.body = '{body}'\n")
        script.write('wrk.headers["Content-Type"] = "application/json"\n')
    argv = ["wrk", "-t", "1", "-c", str(connections), "-d", f"{seconds}s", "--latency"]
    proc = subprocess.Popen([*argv, "-s", script.name, url], stdout=subprocess.PIPE, text=True)
    os.sched_setaffinity(proc.pid, cpus)
    out, _ = proc.communicate()
    os.unlink(script.name)
    if "Non-2xx" in out or "Socket errors" in out or " 0 requests in" in out:
        print(out, file=sys.stderr)

    def find(pattern: str) -> str:
        match = re.search(pattern, out)
        if match is None:
            raise SystemExit(f"unexpected wrk output:\n{out}")
        return match.group(1)

    requests = int(find(r"(\d+) requests in"))
    took = _ms(find(r"\d+ requests in ([\d.]+\w+)")) / 1000.0
    return requests, took, _ms(find(r"50%\s+([\d.]+\w+)")), _ms(find(r"99%\s+([\d.]+\w+)"))


def _ms(text: str) -> float:
    match = re.match(r"([\d.]+)(\w+)", text)
    assert match is not None
    value, unit = match.groups()
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}[unit]


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
    raise SystemExit(f"no port in {port_file}: a bench server did not start")


def run(args: argparse.Namespace) -> list[Result]:
    cpus = sorted(os.sched_getaffinity(0))
    endpoint_cpu, others = {cpus[0]}, set(cpus[1:]) or {cpus[0]}
    tmp = Path(tempfile.mkdtemp())
    me = [sys.executable, __file__]
    children: list[subprocess.Popen[str]] = []
    try:
        up = [
            *me,
            "--upstream",
            str(tmp / "up"),
            "--events",
            str(args.events),
            "--gap",
            str(args.gap),
        ]
        children.append(start(up, others))
        children.append(bare := start([*me, "--bare", str(tmp / "bare")], endpoint_cpu))
        lane = f"http://127.0.0.1:{wait_port(tmp / 'up')}"
        floor = f"http://127.0.0.1:{wait_port(tmp / 'bare')}"
        argv = [sys.executable, "-m", "ddsup", "endpoint", "--port", "0", "--lane", f"m={lane}"]
        children.append(endpoint := start(argv, endpoint_cpu))
        assert endpoint.stdout is not None
        url = endpoint.stdout.readline().split()[-1]
        plain = '{"model":"m","prompt":"hi","max_tokens":16}'
        stream = '{"model":"m","prompt":"hi","stream":true}'
        results = []
        for name, base, body, measured in (
            ("floor", floor, plain, bare),
            ("direct", lane, plain, None),
            ("endpoint", url, plain, endpoint),
            ("direct SSE", lane, stream, None),
            ("endpoint SSE", url, stream, endpoint),
        ):
            target = f"{base}/v1/completions"
            wrk(target, body, 1, args.connections, others)  # warm-up
            proc = psutil.Process(measured.pid) if measured else None
            before = sum(proc.cpu_times()[:2]) if proc else 0.0
            n, took, p50, p99 = wrk(target, body, args.seconds, args.connections, others)
            cpu = sum(proc.cpu_times()[:2]) - before if proc else None
            results.append(Result(name, n, took, p50, p99, cpu))
        return results
    finally:
        for child in children:
            child.terminate()
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def report(results: list[Result], events: int) -> None:
    by = {r.name: r for r in results}
    floor_us = by["floor"].cpu_us or float("nan")
    plain_us = by["endpoint"].cpu_us or 0.0
    print(
        f"{'scenario':<14}{'req/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'+p50 ms':>9}{'+p99 ms':>9}"
        f"{'CPU µs/req':>12}{'µs/event':>10}{'x floor':>9}"
    )
    for r in results:
        direct = by["direct SSE" if "SSE" in r.name else "direct"]
        added = r.name.startswith("endpoint")
        us = r.cpu_us
        per_event = f"{(us - plain_us) / events:.1f}" if us is not None and "SSE" in r.name else "-"
        print(
            f"{r.name:<14}{r.rps:>9.0f}{r.p50_ms:>9.2f}{r.p99_ms:>9.2f}"
            f"{(r.p50_ms - direct.p50_ms) if added else 0.0:>9.2f}"
            f"{(r.p99_ms - direct.p99_ms) if added else 0.0:>9.2f}"
            f"{'-' if us is None else f'{us:.0f}':>12}{per_event:>10}"
            f"{'-' if us is None else f'{us / floor_us:.2f}':>9}"
        )
    print(
        f"SSE: {events} events per request; µs/event = (SSE µs/req - plain µs/req) / events.\n"
        "CPU: the serving process's user+system time (psutil). 'floor' is a bare trio + h11\n"
        "server answering a fixed body on the same core; SPEC §5 measured it at ~113 µs on\n"
        "the reference machine, so 'x floor' × 113 µs estimates the cost there."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--events", type=int, default=50, help="SSE events per streamed request")
    parser.add_argument("--gap", type=float, default=0.001, help="seconds between SSE events")
    parser.add_argument("--upstream", help=argparse.SUPPRESS)
    parser.add_argument("--bare", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare:
        serve_bare(args.bare)
    elif args.upstream:
        Upstream(args.events, args.gap).serve(args.upstream)
    elif not shutil.which("wrk"):
        raise SystemExit("wrk is needed: apt-get install -y wrk")
    else:
        report(run(args), args.events)


if __name__ == "__main__":
    main()
