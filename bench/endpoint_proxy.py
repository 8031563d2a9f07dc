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
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import psutil

JSON_BODY = (
    b'{"id":"cmpl-1","object":"text_completion","model":"m","choices":[{"index":0,'
    b'"text":"hello world","finish_reason":"stop"}],"usage":{"prompt_tokens":1,'
    b'"completion_tokens":2,"total_tokens":3}}'
)
EVENT = b'data: {"choices":[{"text":"tok"}]}\n\n'


class Upstream:
    """The bench lane: JSON, or ``events`` SSE events ``gap`` s apart when streaming (a
    request's own ``"events": N``, a field of the benches only, asks for N instead)."""

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
                asked = re.search(rb'"events":\s*(\d+)', body)  # a bench's own field
                events = int(asked.group(1)) if asked else self.events
                self._schedule(time.monotonic() + self.gap, sock, max(events, 1))
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


def serve_naive(port_file: str, lane: str) -> None:
    """The issue's baseline: a naive hypercorn + httpx proxy (each request → one httpx call).

    Non-streaming only: it buffers the lane's answer, which is what makes it naive.
    """
    import httpx
    import trio
    from hypercorn.config import Config
    from hypercorn.trio import serve

    async def main() -> None:
        async with httpx.AsyncClient(limits=httpx.Limits(max_keepalive_connections=64)) as client:

            async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
                if scope["type"] == "lifespan":
                    while (message := await receive())["type"] != "lifespan.shutdown":
                        await send({"type": "lifespan.startup.complete"})
                    await send({"type": "lifespan.shutdown.complete"})
                    return
                body, more = b"", True
                while more:
                    message = await receive()
                    body += message.get("body", b"")
                    more = message.get("more_body", False)
                headers = {"content-type": "application/json"}
                answer = await client.post(lane + scope["path"], content=body, headers=headers)
                head = [(b"content-type", answer.headers["content-type"].encode())]
                await send(
                    {"type": "http.response.start", "status": answer.status_code, "headers": head}
                )
                await send({"type": "http.response.body", "body": answer.content})

            config = Config()
            config.bind = ["127.0.0.1:0"]
            config.accesslog = config.errorlog = None
            async with trio.open_nursery() as nursery:
                binds = await nursery.start(partial(serve, app, config, mode="asgi"))  # type: ignore[arg-type]
                await trio.Path(port_file).write_text(binds[0].rsplit(":", 1)[1])

    trio.run(main)


Child = subprocess.Popen[Any]


@dataclass(frozen=True)
class Result:
    """One wrk run against one variant; ``cpu_s`` is the serving process's CPU time."""

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


@dataclass(frozen=True)
class Variant:
    """Where wrk sends a scenario, and which processes' CPU time it is charged to."""

    name: str
    base: str
    body: str
    serving: tuple[psutil.Process, ...]


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


def ensure_nginx() -> str:
    """The nginx binary; installs Debian's ``nginx-light`` (else ``nginx``) when absent.

    Debian's package would start the system service where no ``policy-rc.d`` forbids
    it: that nginx is stopped again, so the bench leaves no process behind.
    """
    found = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/sbin")
    if found:
        return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise SystemExit("nginx is needed: apt-get install -y nginx-light")
    print("installing nginx-light (apt-get) …", file=sys.stderr)
    service_pid = Path("/run/nginx.pid")
    was_running = service_pid.exists()
    for update_first in (False, True):
        if update_first:
            _quietly(["apt-get", "update", "-qq"])
        for package in ("nginx-light", "nginx"):
            _quietly(["apt-get", "install", "-y", "-qq", "--no-install-recommends", package])
            found = shutil.which("nginx", path="/usr/sbin:/usr/bin:/sbin")
            if found:
                if service_pid.exists() and not was_running:
                    _quietly([found, "-s", "quit"])  # the system service, started by apt
                return found
    raise SystemExit("could not install nginx: run apt-get install -y nginx-light")


def _quietly(argv: list[str]) -> None:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    out = subprocess.DEVNULL
    subprocess.run(argv, env=env, stdout=out, stderr=out, timeout=600, check=False)


NGINX_CONF = """\
daemon off;
master_process on;
worker_processes 1;
worker_cpu_affinity {mask};
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 8192; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/client_body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    keepalive_requests 1000000;
    upstream lanes {{
{servers}
        keepalive 256;
        keepalive_requests 1000000;
    }}
    server {{
        listen 127.0.0.1:{port} backlog=1024;
        location / {{
            proxy_pass http://lanes;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }}
    }}
}}
"""


def start_nginx(binary: str, lanes: list[str], cpu: int, tmp: Path) -> tuple[Child, str]:
    """nginx in front of ``lanes``, its one worker on ``cpu``; returns (master, base URL).

    The bench binds the listening socket itself (port 0) and hands it to nginx the way
    nginx hands sockets to a new binary on upgrade (``NGINX="fd;"``), so no port is
    guessed and none can be taken in between.
    """
    home = tmp / "nginx"
    home.mkdir()
    listener = socket.create_server(("127.0.0.1", 0), backlog=1024)
    port = listener.getsockname()[1]
    servers = "\n".join(f"        server {lane.removeprefix('http://')};" for lane in lanes)
    mask = "1" + "0" * cpu  # worker_cpu_affinity: the rightmost digit is CPU 0
    conf = home / "nginx.conf"
    conf.write_text(NGINX_CONF.format(mask=mask, tmp=home, servers=servers, port=port))
    fd = listener.fileno()
    argv = [binary, "-p", str(home), "-c", str(conf), "-e", str(home / "error.log")]
    proc = subprocess.Popen(argv, env={**os.environ, "NGINX": f"{fd};"}, pass_fds=(fd,))
    listener.close()  # nginx holds its own copy
    os.sched_setaffinity(proc.pid, {cpu})
    deadline = time.monotonic() + 20
    while len(psutil.Process(proc.pid).children()) < 1:
        if proc.poll() is not None or time.monotonic() > deadline:
            log = (home / "error.log").read_text() if (home / "error.log").exists() else ""
            raise SystemExit(f"nginx did not start (status {proc.poll()}):\n{log}")
        time.sleep(0.05)  # nginx forks its worker: bounded poll for an external process
    return proc, f"http://127.0.0.1:{port}"


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


def cpu_time(processes: tuple[psutil.Process, ...]) -> float:
    """User + system seconds of ``processes`` and their children (nginx's worker)."""
    total = 0.0
    for proc in processes:
        for one in (proc, *proc.children(recursive=True)):
            times = one.cpu_times()
            total += times.user + times.system
    return total


def stop_all(children: list[Child]) -> None:
    """SIGTERM each child (nginx's master ends its worker), SIGKILL what lingers."""
    descendants = []
    for child in children:
        with contextlib.suppress(psutil.Error):
            descendants += psutil.Process(child.pid).children(recursive=True)
        if child.poll() is None:
            child.terminate()
    for child in children:
        try:
            child.wait(10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    _, alive = psutil.wait_procs(descendants, timeout=5)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()


def run(args: argparse.Namespace) -> dict[str, list[Result]]:
    """Every variant ``args.reps`` times, the order rotated each repetition."""
    cpus = sorted(os.sched_getaffinity(0))
    endpoint_cpu, others = {cpus[0]}, set(cpus[1:]) or {cpus[0]}
    nginx = ensure_nginx()
    tmp = Path(tempfile.mkdtemp(prefix="ddsup-bench-"))
    me = [sys.executable, __file__]
    children: list[Child] = []
    try:
        ups = []
        for i in range(args.lanes):
            up = [*me, "--upstream", str(tmp / f"up{i}"), "--events", str(args.events)]
            children.append(start([*up, "--gap", str(args.gap)], others))
            ups.append(children[-1])
        children.append(bare := start([*me, "--bare", str(tmp / "bare")], endpoint_cpu))
        lanes = [f"http://127.0.0.1:{wait_port(tmp / f'up{i}')}" for i in range(args.lanes)]
        floor = f"http://127.0.0.1:{wait_port(tmp / 'bare')}"
        argv = [sys.executable, "-m", "ddsup", "endpoint", "--port", "0"]
        argv += [a for lane in lanes for a in ("--lane", f"m={lane}")]
        children.append(endpoint := start(argv, endpoint_cpu))
        assert endpoint.stdout is not None
        url = endpoint.stdout.readline().split()[-1]
        naive_argv = [*me, "--naive", str(tmp / "naive"), "--naive-lane", lanes[0]]
        children.append(naive := start(naive_argv, endpoint_cpu))
        naive_url = f"http://127.0.0.1:{wait_port(tmp / 'naive')}"
        master, proxy = start_nginx(nginx, lanes, cpus[0], tmp)
        children.append(master)
        lane0, ep, ngx = (psutil.Process(p.pid) for p in (ups[0], endpoint, master))
        plain = '{"model":"m","prompt":"hi","max_tokens":16}'
        stream = '{"model":"m","prompt":"hi","stream":true}'
        variants = [
            Variant("direct", lanes[0], plain, (lane0,)),
            Variant("nginx", proxy, plain, (ngx,)),
            Variant("endpoint", url, plain, (ep,)),
            Variant("floor", floor, plain, (psutil.Process(bare.pid),)),
            Variant("naive", naive_url, plain, (psutil.Process(naive.pid),)),
            Variant("direct SSE", lanes[0], stream, (lane0,)),
            Variant("nginx SSE", proxy, stream, (ngx,)),
            Variant("endpoint SSE", url, stream, (ep,)),
        ]
        results: dict[str, list[Result]] = {v.name: [] for v in variants}
        for rep in range(args.reps):
            for v in variants[rep % len(variants) :] + variants[: rep % len(variants)]:
                target = f"{v.base}/v1/completions"
                if rep == 0:
                    wrk(target, v.body, 1, args.connections, others)  # warm-up
                before = cpu_time(v.serving)
                n, took, p50, p99 = wrk(target, v.body, args.seconds, args.connections, others)
                cpu = cpu_time(v.serving) - before
                results[v.name].append(Result(v.name, n, took, p50, p99, cpu))
        return results
    finally:
        stop_all(children)
        shutil.rmtree(tmp, ignore_errors=True)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def report(results: dict[str, list[Result]], args: argparse.Namespace) -> None:
    med = {
        name: {
            "rps": median([r.rps for r in rs]),
            "p50": median([r.p50_ms for r in rs]),
            "p99": median([r.p99_ms for r in rs]),
            "cpu": median([r.cpu_us for r in rs if r.cpu_us is not None]),
        }
        for name, rs in results.items()
    }
    reps = len(next(iter(results.values())))
    print(
        f"plain JSON, wrk -c {args.connections}, {args.seconds}s × {reps} reps (medians); "
        "CPU = the serving process (lane for 'direct', proxy otherwise)"
    )
    _table(med, ("direct", "nginx", "endpoint", "naive", "floor"), "direct")
    print(f"\nSSE, {args.events} events per request, {args.gap * 1000:g} ms apart")
    _table(med, ("direct SSE", "nginx SSE", "endpoint SSE"), "direct SSE")
    for proxy in ("nginx", "endpoint"):
        per_event = (med[f"{proxy} SSE"]["cpu"] - med[proxy]["cpu"]) / args.events
        print(f"  {proxy:<9} CPU per event: {per_event:6.1f} µs")
    print(
        "µs/event = (SSE CPU µs/req - plain CPU µs/req) / events. 'floor' is a bare trio + h11\n"
        "server answering a fixed body on the endpoint's core; SPEC §5 measured nginx at\n"
        "~21 µs/req and that floor at ~113 µs/req on the reference machine, so\n"
        "'x floor' × 113 µs estimates the cost there. 'naive' is the endpoint issue's baseline,\n"
        "hypercorn + httpx (~600 req/s on one core where the issue measured it)."
    )


def _table(med: dict[str, dict[str, float]], rows: tuple[str, ...], direct: str) -> None:
    base = med[direct]
    floor = med["floor"]["cpu"]
    print(
        f"  {'variant':<14}{'req/s':>9}{'x direct':>10}{'p50 ms':>9}{'p99 ms':>9}"
        f"{'+p50 ms':>9}{'+p99 ms':>9}{'CPU µs/req':>12}{'x floor':>9}"
    )
    for name in rows:
        m = med[name]
        added = name != direct
        print(
            f"  {name:<14}{m['rps']:>9.0f}{m['rps'] / base['rps']:>10.2f}"
            f"{m['p50']:>9.2f}{m['p99']:>9.2f}"
            f"{(m['p50'] - base['p50']) if added else 0.0:>9.2f}"
            f"{(m['p99'] - base['p99']) if added else 0.0:>9.2f}"
            f"{m['cpu']:>12.0f}{m['cpu'] / floor:>9.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=int, default=5, help="wrk time per run")
    parser.add_argument("--reps", type=int, default=3, help="repetitions (medians reported)")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--lanes", type=int, default=1, help="upstream lanes behind proxies")
    parser.add_argument("--events", type=int, default=50, help="SSE events per streamed request")
    parser.add_argument("--gap", type=float, default=0.001, help="seconds between SSE events")
    parser.add_argument("--upstream", help=argparse.SUPPRESS)
    parser.add_argument("--bare", help=argparse.SUPPRESS)
    parser.add_argument("--naive", help=argparse.SUPPRESS)
    parser.add_argument("--naive-lane", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare:
        serve_bare(args.bare)
    elif args.naive:
        serve_naive(args.naive, args.naive_lane)
    elif args.upstream:
        Upstream(args.events, args.gap).serve(args.upstream)
    elif not shutil.which("wrk"):
        raise SystemExit("wrk is needed: apt-get install -y wrk")
    else:
        report(run(args), args)


if __name__ == "__main__":
    main()
