"""CPU the endpoint spends on one 429, and its latency, with nothing else going on.

Starts ``ddsup endpoint --max-queue-per-lane 1`` in front of one "lane" that is a
listening socket which never answers; one request fills the lane, and then ``--count``
requests are sent one after another on one keep-alive connection: every one is a 429.
Prints the endpoint's CPU (user + system, psutil) per 429 and the client's p50/p99.

    .venv/bin/python bench/endpoint_429_cost.py [--count 3000] [--reps 3]
"""

from __future__ import annotations

import argparse
import signal
import socket
import statistics
import subprocess
import sys
import time

import psutil

BODY = b'{"model":"m","prompt":"hi","max_tokens":4}'
REQUEST = (
    b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
    b"content-length: %d\r\n\r\n%s" % (len(BODY), BODY)
)


def _receive(conn: socket.socket) -> bytes:
    data = conn.recv(65536)
    if not data:
        raise SystemExit("the endpoint closed the connection")
    return data


def _answer(conn: socket.socket) -> tuple[bytes, bytes]:
    """One content-length-framed answer: (status line, body)."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += _receive(conn)
    head, body = buf.split(b"\r\n\r\n", 1)
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length")
    )
    while len(body) < length:
        body += _receive(conn)
    return head.split(b"\r\n", 1)[0], body


def _wait_admitted(conn: socket.socket) -> None:
    """Until the endpoint counts the filler request at the lane (its outstanding gauge is 1)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        conn.sendall(b"GET /metrics HTTP/1.1\r\nhost: x\r\n\r\n")
        for line in _answer(conn)[1].decode().splitlines():
            if line.startswith("ddsup_endpoint_lane_outstanding{") and line.endswith(" 1"):
                return
        time.sleep(0.01)
    raise SystemExit("the filler request never reached the lane")


def measure(count: int) -> tuple[float, float, float]:
    """(CPU µs per 429, p50 ms, p99 ms) of one endpoint process."""
    with socket.socket() as hole:
        hole.bind(("127.0.0.1", 0))
        hole.listen(128)  # connections complete in the backlog; nothing is ever read
        lane = f"m=http://127.0.0.1:{hole.getsockname()[1]}"
        argv = [sys.executable, "-m", "ddsup", "endpoint", "--port", "0", "--retries", "0"]
        argv += ["--max-queue-per-lane", "1", "--lane", lane]
        endpoint = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        try:
            assert endpoint.stdout is not None
            host, port = (
                endpoint.stdout.readline().split()[-1].removeprefix("http://").rsplit(":", 1)
            )
            with socket.create_connection((host, int(port))) as filler:
                filler.sendall(REQUEST)
                with socket.create_connection((host, int(port))) as conn:
                    _wait_admitted(conn)
                    for _ in range(200):  # warm-up
                        conn.sendall(REQUEST)
                        _answer(conn)
                    proc = psutil.Process(endpoint.pid)
                    before = proc.cpu_times()
                    latencies = []
                    for _ in range(count):
                        started = time.perf_counter()
                        conn.sendall(REQUEST)
                        status = _answer(conn)[0]
                        latencies.append(time.perf_counter() - started)
                        if b" 429 " not in status + b" ":
                            raise SystemExit(f"expected 429, got {status!r}")
                    after = proc.cpu_times()
        finally:
            endpoint.send_signal(signal.SIGTERM)
            endpoint.wait(10)
    cpu = after.user + after.system - before.user - before.system
    latencies.sort()
    return 1e6 * cpu / count, 1e3 * latencies[count // 2], 1e3 * latencies[int(count * 0.99)]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--count", type=int, default=3000, help="429s per repetition")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    runs = [measure(args.count) for _ in range(args.reps)]
    for name, i in (("endpoint CPU per 429 (µs)", 0), ("p50 (ms)", 1), ("p99 (ms)", 2)):
        values = [run[i] for run in runs]
        print(
            f"{name:<28} median {statistics.median(values):8.2f}  ({min(values):.2f}–{max(values):.2f})"
        )


if __name__ == "__main__":
    main()
