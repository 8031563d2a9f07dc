"""The servers the endpoint benches put around the endpoint, and the load they drive.

- ``Upstream``: the bench lane, a hand-rolled HTTP/1.1 server on one selector, as cheap
  as a lane can be, so that what is measured is the proxy in front of it (JSON, or SSE
  events ``--gap`` s apart);
- the floors: what a Python server or proxy costs before its first feature, beside the
  endpoint in one run. ``floor h11`` and ``floor httptools`` are bare trio servers that
  answer a fixed body, parsing with h11 or httptools. The two floor proxies forward the
  bench's requests (HTTP/1.1 keep-alive, a Content-Length body, parsed with httptools) to
  a lane and relay the answer's bytes verbatim (Content-Length or chunked SSE) until its
  end; neither admits, retries, counts or times anything:

  - **tasks**, the endpoint's shape: one trio task per client connection, a keep-alive
    lane connection of its own, non-blocking ``recv``/``send`` tried first and
    ``trio.lowlevel.wait_readable`` when they would block (two trio waits per plain
    request: the client's next request, the lane's answer);
  - **epoll**, nginx's shape inside one trio task: every client and lane socket is
    registered once, edge-triggered, in an epoll set of its own; the task waits for that
    set's descriptor and runs each ready socket's handler until its reads would block
    (no trio task switch and no ``epoll_ctl`` per request).

  If the tasks floor alone costs more than a goal allows, no work inside the endpoint's
  per-request code reaches that goal; the epoll floor says what a callback core would;
- nginx (Debian's, installed with apt-get when missing) with a private configuration,
  and wrk.

Each server runs as a process of its own, ``python bench/endpoint_servers.py KIND
PORT_FILE …`` (``server_argv``), and writes the port it bound into ``PORT_FILE``.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import re
import select
import selectors
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

Child = subprocess.Popen[Any]
HERE = Path(__file__).resolve()

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


def serve_h11_floor(port_file: str) -> None:
    """The h11 floor: bare trio, parsing with h11, answering a fixed body."""
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


def serve_httptools_floor(port_file: str) -> None:
    """The httptools floor: bare trio, parsing with httptools, answering a fixed body."""
    import httptools
    import trio

    answer = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
    answer += b"content-length: %d\r\n\r\n%s" % (len(JSON_BODY), JSON_BODY)

    class Done:
        def __init__(self) -> None:
            self.count = 0

        def on_message_complete(self) -> None:
            self.count += 1

    async def handle(stream: trio.SocketStream) -> None:
        done = Done()
        parser = httptools.HttpRequestParser(done)
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            while data := await stream.receive_some(65536):
                parser.feed_data(data)
                if done.count:
                    await stream.send_all(answer * done.count)
                    done.count = 0

    async def main() -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        await trio.Path(port_file).write_text(str(listeners[0].socket.getsockname()[1]))
        await trio.serve_listeners(handle, listeners)

    trio.run(main)


RECEIVE = 65536


class _Head:
    """httptools' callbacks: the Content-Length of one request head."""

    def __init__(self) -> None:
        self.length = 0

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"content-length":
            self.length = int(value)


def _next_request(parser: Any, head: _Head, buf: bytes) -> int:
    """The length of the whole first request in ``buf``, or 0 while it is incomplete."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return 0
    head.length = 0
    parser.feed_data(buf[: end + 4])
    total = end + 4 + head.length
    if len(buf) < total:
        return 0
    parser.feed_data(buf[end + 4 : total])
    return total


class _Answer:
    """Where a lane's answer ends: its Content-Length, or the chunked stream's last chunk."""

    def __init__(self) -> None:
        self.head = b""
        self.left = -1  # body bytes still to come (Content-Length)
        self.chunked = False
        self.tail = b""

    def feed(self, data: bytes) -> bool:
        """Account for ``data``; True when the answer is complete."""
        if self.left < 0 and not self.chunked:
            self.head += data
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                return False
            lowered = self.head[:end].lower()
            data = self.head[end + 4 :]
            if b"transfer-encoding: chunked" in lowered:
                self.chunked = True
            else:
                at = lowered.find(b"content-length:") + len(b"content-length:")
                self.left = int(lowered[at : lowered.find(b"\r\n", at)])
        if self.chunked:
            self.tail = (self.tail + data)[-5:]
            done = self.tail == b"0\r\n\r\n"
        else:
            self.left -= len(data)
            done = self.left <= 0
        if done:
            self.head, self.left, self.chunked, self.tail = b"", -1, False, b""
        return done


def serve_tasks(port_file: str, lanes: list[str]) -> None:
    """The tasks floor: one trio task per client connection (see the module docstring)."""
    import httptools
    import trio

    addresses = itertools.cycle([_address(lane) for lane in lanes])

    async def recv(sock: socket.socket) -> bytes:
        while True:
            try:
                return sock.recv(RECEIVE)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(sock)

    async def send(sock: socket.socket, data: bytes) -> None:
        while data:
            try:
                data = data[sock.send(data) :]
            except BlockingIOError:
                await trio.lowlevel.wait_writable(sock)

    async def handle(stream: trio.SocketStream) -> None:
        client = stream.socket._sock  # type: ignore[attr-defined]  # the stdlib socket
        connection = trio.socket.socket()
        lane = connection._sock  # type: ignore[attr-defined]
        head = _Head()
        parser = httptools.HttpRequestParser(head)
        answer = _Answer()
        buf = b""
        with connection, contextlib.suppress(OSError, trio.BrokenResourceError):
            await connection.connect(next(addresses))
            lane.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while True:
                size = _next_request(parser, head, buf)
                if not size:
                    await trio.lowlevel.wait_readable(client)  # after an answer: wait first
                    data = await recv(client)
                    if not data:
                        return
                    buf += data
                    continue
                await send(lane, buf[:size])
                buf = buf[size:]
                while True:
                    data = await recv(lane)
                    if not data:
                        return
                    await send(client, data)
                    if answer.feed(data):
                        break

    async def main() -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        await trio.Path(port_file).write_text(str(listeners[0].socket.getsockname()[1]))
        await trio.serve_listeners(handle, listeners)

    trio.run(main)


class _Pair:
    """One client connection and its lane connection, as the epoll floor drives them."""

    def __init__(self, client: socket.socket, lane: socket.socket, parser_type: Any) -> None:
        self.client = client
        self.lane = lane
        self.head = _Head()
        self.parser = parser_type(self.head)
        self.answer = _Answer()
        self.buf = b""
        self.busy = False  # a request is at the lane

    def client_ready(self) -> bool:
        """Read what the client sent; forward a request if none is in flight. False: closed."""
        while True:
            try:
                data = self.client.recv(RECEIVE)
            except BlockingIOError:
                break
            if not data:
                return False
            self.buf += data
        self._forward()
        return True

    def lane_ready(self) -> bool:
        """Relay what the lane sent; at an answer's end, forward the next request."""
        while True:
            try:
                data = self.lane.recv(RECEIVE)
            except BlockingIOError:
                return True
            if not data:
                return False
            self.client.sendall(data)  # the bench's answers fit a socket buffer
            if self.answer.feed(data):
                self.busy = False
                self._forward()

    def _forward(self) -> None:
        if self.busy:
            return
        size = _next_request(self.parser, self.head, self.buf)
        if size:
            self.lane.sendall(self.buf[:size])
            self.buf = self.buf[size:]
            self.busy = True


def serve_epoll(port_file: str, lanes: list[str]) -> None:
    """The epoll floor: callbacks off one edge-triggered set (see the module docstring)."""
    import httptools
    import trio

    addresses = itertools.cycle([_address(lane) for lane in lanes])
    listener = socket.create_server(("127.0.0.1", 0), backlog=1024)
    listener.setblocking(False)
    Path(port_file).write_text(str(listener.getsockname()[1]))
    ready = select.epoll()
    ready.register(listener.fileno(), select.EPOLLIN)
    handlers: dict[int, Any] = {}
    edge = select.EPOLLIN | select.EPOLLET | select.EPOLLRDHUP

    def close(pair: _Pair) -> None:
        for sock in (pair.client, pair.lane):
            handlers.pop(sock.fileno(), None)
            with contextlib.suppress(OSError):
                ready.unregister(sock.fileno())
            sock.close()

    def accept() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except BlockingIOError:
                return
            lane = socket.create_connection(next(addresses))  # loopback: at once
            for sock in (client, lane):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.setblocking(False)
            pair = _Pair(client, lane, httptools.HttpRequestParser)
            handlers[client.fileno()] = (pair.client_ready, pair)
            handlers[lane.fileno()] = (pair.lane_ready, pair)
            ready.register(client.fileno(), edge)
            ready.register(lane.fileno(), edge)

    async def main() -> None:
        with ready, listener:
            while True:
                await trio.lowlevel.wait_readable(ready.fileno())
                for fd, _ in ready.poll(0):
                    if fd == listener.fileno():
                        accept()
                        continue
                    handler = handlers.get(fd)
                    if handler is None:
                        continue
                    try:
                        alive = handler[0]()
                    except OSError:
                        alive = False
                    if not alive:
                        close(handler[1])

    trio.run(main)


def _address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


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


def start_nginx(binary: str, lanes: list[str], cores: list[int], tmp: Path) -> tuple[Child, str]:
    """nginx in front of ``lanes`` with one worker per core in ``cores`` (least_conn)."""
    home = tmp / f"nginx-{len(cores)}w"
    home.mkdir()
    listener = socket.create_server(("127.0.0.1", 0), backlog=1024)
    port = listener.getsockname()[1]
    servers = "        least_conn;\n" + "\n".join(
        f"        server {lane.removeprefix('http://')};" for lane in lanes
    )
    masks = " ".join("1" + "0" * core for core in cores)
    conf = NGINX_CONF.format(mask=masks, tmp=home, servers=servers, port=port)
    conf = conf.replace("worker_processes 1;", f"worker_processes {len(cores)};")
    (home / "nginx.conf").write_text(conf)
    fd = listener.fileno()
    argv = [binary, "-p", str(home), "-c", str(home / "nginx.conf"), "-e", str(home / "err.log")]
    proc = subprocess.Popen(argv, env={**os.environ, "NGINX": f"{fd};"}, pass_fds=(fd,))
    listener.close()
    os.sched_setaffinity(proc.pid, set(cores))
    deadline = time.monotonic() + 20
    while len(psutil.Process(proc.pid).children()) < len(cores):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"nginx did not start (status {proc.poll()})")
        time.sleep(0.05)  # nginx forks its workers: bounded poll for an external process
    return proc, f"http://127.0.0.1:{port}"


def start(
    argv: list[str], cpus: set[int] | frozenset[int], env: dict[str, str] | None = None
) -> Child:
    """``argv`` pinned to ``cpus``, its output piped (the servers print their URL)."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
    os.sched_setaffinity(proc.pid, cpus)
    return proc


def server_argv(kind: str, port_file: Path, *args: str) -> list[str]:
    """The command line of one of this module's servers (see :func:`main`)."""
    return [sys.executable, str(HERE), kind, str(port_file), *args]


def first_line_url(proc: Child) -> str:
    """The URL a ``ddsup`` server prints on its first line."""
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        raise SystemExit(f"{proc.args!r} exited before printing its URL")
    return str(line.split()[-1])


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


@dataclass(frozen=True)
class WrkRun:
    """What one wrk run reports."""

    requests: int
    non2xx: int
    seconds: float
    p50_ms: float
    p99_ms: float
    socket_errors: str  # wrk's line, "" when there were none


def wrk(
    url: str, body: str | Sequence[str], seconds: float, connections: int, cpus: set[int]
) -> WrkRun:
    """wrk POSTing ``body`` to ``url`` for ``seconds``, pinned to ``cpus``; several bodies
    are sent in turn, one per request."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n')
        if isinstance(body, str):
            script.write(f"wrk.body = [==[{body}]==]\n")
        else:  # Lua's long brackets take a JSON text as it is
            listed = ",".join(f"[==[{b}]==]" for b in body)
            script.write(f"bodies = {{{listed}}}\n")
            script.write(
                "local i = 0\nrequest = function()\n  i = i % #bodies + 1\n"
                "  return wrk.format(nil, nil, nil, bodies[i])\nend\n"
            )
    argv = ["wrk", "-t", "1", "-c", str(connections), "-d", f"{seconds:g}s", "--latency"]
    proc = subprocess.Popen([*argv, "-s", script.name, url], stdout=subprocess.PIPE, text=True)
    os.sched_setaffinity(proc.pid, cpus)
    out, _ = proc.communicate()
    os.unlink(script.name)

    def find(pattern: str, default: str | None = None) -> str:
        match = re.search(pattern, out)
        if match is None:
            if default is not None:
                return default
            raise SystemExit(f"unexpected wrk output for {url}:\n{out}")
        return match.group(1)

    return WrkRun(
        requests=int(find(r"(\d+) requests in")),
        non2xx=int(find(r"Non-2xx or 3xx responses: (\d+)", "0")),
        seconds=_ms(find(r"\d+ requests in ([\d.]+\w+)")) / 1000.0,
        p50_ms=_ms(find(r"50%\s+([\d.]+\w+)")),
        p99_ms=_ms(find(r"99%\s+([\d.]+\w+)")),
        socket_errors=find(r"(Socket errors:[^\n]*)", ""),
    )


def _ms(text: str) -> float:
    match = re.match(r"([\d.]+)(\w+)", text)
    assert match is not None
    value, unit = match.groups()
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}[unit]


def main() -> None:
    parser = argparse.ArgumentParser(description="one of the endpoint benches' servers")
    kinds = parser.add_subparsers(dest="kind", required=True)
    upstream = kinds.add_parser("upstream", help="the bench lane")
    upstream.add_argument("port_file")
    upstream.add_argument("--events", type=int, default=20, help="SSE events per request")
    upstream.add_argument("--gap", type=float, default=0.002, help="seconds between events")
    for kind in ("floor-h11", "floor-httptools"):
        kinds.add_parser(kind, help="a bare server answering a fixed body").add_argument(
            "port_file"
        )
    for kind in ("floor-tasks", "floor-epoll"):
        floor = kinds.add_parser(kind, help="a bare proxy in front of LANE…")
        floor.add_argument("port_file")
        floor.add_argument("lanes", nargs="+", metavar="LANE")
    args = parser.parse_args()
    if args.kind == "upstream":
        Upstream(args.events, args.gap).serve(args.port_file)
    elif args.kind == "floor-h11":
        serve_h11_floor(args.port_file)
    elif args.kind == "floor-httptools":
        serve_httptools_floor(args.port_file)
    elif args.kind == "floor-tasks":
        serve_tasks(args.port_file, args.lanes)
    else:
        serve_epoll(args.port_file, args.lanes)


if __name__ == "__main__":
    main()
