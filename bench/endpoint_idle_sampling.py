"""The endpoint's CPU while idle in front of N lanes: the cost of sampling their /metrics.

The endpoint samples lanes' ``vllm:num_requests_waiting`` for admission. This bench starts
``ddsup endpoint --lane m=URL …`` (a static lane list, nothing else of ddsup) in front of
``--lanes`` lanes, sends it no request, and measures over ``--seconds`` (after
``--warmup`` seconds, which hold the first round of every lane's /metrics and
/v1/models): the CPU of the endpoint's processes (parent and workers) as % of one core,
and the /metrics and /v1/models fetches the lanes served per second.

With ``--lane-server nginx`` (the default) the lanes are one Debian nginx (one worker
process, keep-alive, no access log) listening on ``--lanes`` loopback ports, so the lanes
cost a few MiB and no Python, and keep their connections as vLLM's uvicorn does;
nginx's ``stub_status`` counts the requests. With ``--lane-server busybox`` each lane is
a ``busybox httpd`` process, as in ``bench/scale_allocation.py``: it closes every
connection after one answer, so each fetch also pays a TCP connect (and the figures of
issue 19 came from such lanes); the fetches are not counted then. Each lane answers
``/health``, ``/v1/models`` and ``/metrics``; ``/metrics`` is a body shaped like vLLM
0.6's (the gauges, the counters and the latency histograms with their buckets, about 14
KiB and 231 lines for one model name), so the parse of a real body is in the figure,
not a two-line stand-in.

``--baseline REV`` runs the endpoint of that git revision too (its ``supervisor/``
tree, ``git archive``), alternating with this tree in each repetition, so both come from
one run on the same machine. Every process the bench starts is stopped and reaped.

    .venv/bin/python bench/endpoint_idle_sampling.py [--lanes 256,1024] [--workers 1] \
        [--lane-server nginx|busybox] [--seconds 20] [--warmup 4] [--reps 3] \
        [--baseline main] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil
from endpoint_compare import baseline_env, export_baseline
from endpoint_proxy import ensure_nginx

NGINX_CONF = """\
daemon off;
master_process on;
worker_processes 1;
pid {home}/nginx.pid;
error_log {home}/error.log warn;
worker_rlimit_nofile 20000;
events {{ worker_connections 16384; }}
http {{
    access_log off;
    client_body_temp_path {home}/client_body;
    proxy_temp_path {home}/proxy;
    fastcgi_temp_path {home}/fastcgi;
    uwsgi_temp_path {home}/uwsgi;
    scgi_temp_path {home}/scgi;
    keepalive_requests 1000000;
    keepalive_timeout 300s;
    default_type text/plain;
    server {{
{listens}
        location = /health {{ return 200 "ok"; }}
        location = /v1/models {{
            default_type application/json;
            return 200 '{{"object":"list","data":[{{"id":"m","object":"model"}}]}}';
        }}
        location = /metrics {{ alias {home}/metrics.txt; }}
    }}
    server {{
        listen 127.0.0.1:{status_port};
        location = /status {{ stub_status; }}
    }}
}}
"""


def vllm_like_metrics(model: str, waiting: int) -> str:
    """A /metrics body shaped like vLLM 0.6's for one model name (gauges, counters,
    histograms with vLLM's buckets), with ``waiting`` requests waiting."""
    label = f'model_name="{model}"'
    out = []
    for name in ("python_gc_objects_collected_total", "python_gc_collections_total"):
        out.append(f"# HELP {name} GC.\n# TYPE {name} counter")
        out += [f'{name}{{generation="{g}"}} {g * 100}.0' for g in range(3)]
    for name in ("process_virtual_memory_bytes", "process_resident_memory_bytes"):
        out.append(f"# HELP {name} Memory.\n# TYPE {name} gauge\n{name} 1.2e+10")
    gauges = {
        "vllm:num_requests_running": 3,
        "vllm:num_requests_swapped": 0,
        "vllm:num_requests_waiting": waiting,
        "vllm:gpu_cache_usage_perc": 0.25,
        "vllm:cpu_cache_usage_perc": 0.0,
        "vllm:gpu_prefix_cache_hit_rate": 0.5,
    }
    for name, value in gauges.items():
        out.append(f"# HELP {name} Gauge.\n# TYPE {name} gauge\n{name}{{{label}}} {value}.0")
    for name in ("prompt_tokens", "generation_tokens", "num_preemptions"):
        full = f"vllm:{name}_total"
        out.append(f"# HELP {full} Count.\n# TYPE {full} counter\n{full}{{{label}}} 12345.0")
    buckets: dict[str, list[float]] = {
        "time_to_first_token_seconds": [
            0.001,
            0.005,
            0.01,
            0.02,
            0.04,
            0.06,
            0.08,
            0.1,
            0.25,
            0.5,
            0.75,
            1.0,
            2.5,
            5.0,
            7.5,
            10.0,
        ],
        "time_per_output_token_seconds": [
            0.01,
            0.025,
            0.05,
            0.075,
            0.1,
            0.15,
            0.2,
            0.3,
            0.4,
            0.5,
            0.75,
            1.0,
            2.5,
        ],
        "e2e_request_latency_seconds": [1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0],
        "request_queue_time_seconds": [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 20.0],
        "request_inference_time_seconds": [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0],
        "request_prefill_time_seconds": [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0],
        "request_decode_time_seconds": [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0],
        "request_prompt_tokens": [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000],
        "request_generation_tokens": [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000],
        "request_params_n": [1, 2, 5, 10, 20],
        "request_max_num_generation_tokens": [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000],
        "iteration_tokens_total": [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096],
    }
    for name, edges in buckets.items():
        full = f"vllm:{name}"
        out.append(f"# HELP {full} Histogram.\n# TYPE {full} histogram")
        for i, edge in enumerate([*edges, "+Inf"]):
            out.append(f'{full}_bucket{{le="{edge}",{label}}} {i * 10}.0')
        out.append(f"{full}_count{{{label}}} 120.0\n{full}_sum{{{label}}} 345.6")
    for reason in ("stop", "length", "abort"):
        full = "vllm:request_success_total"
        out.append(f'{full}{{finished_reason="{reason}",{label}}} 99.0')
    return "\n".join(out) + "\n"


@dataclass
class Window:
    """One measured window of one endpoint."""

    code: str
    lanes: int
    cpu_pct: float  # of one core, the endpoint's processes together
    fetches_per_s: float  # requests the lanes served per second (/metrics and /v1/models)
    load: float  # 1-minute load average at the end of the window


def listening_sockets(n: int) -> list[socket.socket]:
    """``n`` loopback sockets listening on ports below the ephemeral range.

    Ports bound to 0 come from the ephemeral range, where other processes' outgoing
    connections take ports too: a port released for a lane to bind was sometimes gone by
    then. These stay bound; nginx inherits them, busybox binds them after they close.
    """
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    socks: list[socket.socket] = []
    port = max(1024, low - 4 * n - 1000)
    while len(socks) < n and port < low:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen(128)
            socks.append(sock)
        except OSError:
            sock.close()
        port += 1
    if len(socks) < n:
        raise SystemExit(f"found {len(socks)} free ports below {low}, not {n}")
    return socks


def start_lanes(
    nginx: str, socks: list[socket.socket], home: Path
) -> tuple[subprocess.Popen[bytes], int]:
    """One nginx serving on every socket of ``socks`` (inherited, as nginx does on an
    upgrade: ``$NGINX``) and on a status port; (its process, its stub_status port)."""
    home.mkdir()
    (home / "metrics.txt").write_text(vllm_like_metrics("m", 0))
    status = socket.socket()
    status.bind(("127.0.0.1", 0))
    status.listen(128)
    status_port = status.getsockname()[1]
    every = [*socks, status]
    ports = [s.getsockname()[1] for s in socks]
    listens = "\n".join(f"        listen 127.0.0.1:{p};" for p in ports)
    conf = NGINX_CONF.format(home=home, listens=listens, status_port=status_port)
    (home / "nginx.conf").write_text(conf)
    argv = [nginx, "-p", str(home), "-c", str(home / "nginx.conf"), "-e", str(home / "err.log")]
    fds = [s.fileno() for s in every]
    env = {**os.environ, "NGINX": "".join(f"{fd};" for fd in fds)}
    proc = subprocess.Popen(argv, env=env, pass_fds=fds)
    status.close()
    deadline = time.monotonic() + 20
    while True:
        try:
            requests_served(status_port)
            return proc, status_port
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise SystemExit(f"nginx did not start: {(home / 'err.log').read_text()}") from None
            time.sleep(0.05)  # nginx starts its worker in its own time: bounded poll


class BusyboxLanes:
    """``busybox httpd`` lanes, one process per port, serving files from one docroot."""

    def __init__(self, ports: list[int], home: Path) -> None:
        box = shutil.which("busybox")
        if box is None:
            raise SystemExit("--lane-server busybox needs busybox: apt-get install -y busybox")
        (home / "v1").mkdir(parents=True)
        (home / "metrics").write_text(vllm_like_metrics("m", 0))
        (home / "health").write_text("ok")
        (home / "v1" / "models").write_text('{"object":"list","data":[{"id":"m"}]}')
        self.procs = [
            subprocess.Popen([box, "httpd", "-f", "-p", f"127.0.0.1:{port}", "-h", str(home)])
            for port in ports
        ]

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def requests_served(status_port: int | None) -> int:
    """Requests nginx has served so far (``stub_status``'s third counter); 0 without it."""
    if status_port is None:
        return 0
    url = f"http://127.0.0.1:{status_port}/status"
    with urllib.request.urlopen(url, timeout=5) as response:
        lines = response.read().decode().splitlines()
    return int(lines[2].split()[2])


def cpu_seconds(proc: psutil.Process) -> float:
    total = 0.0
    for one in (proc, *proc.children(recursive=True)):
        times = one.cpu_times()
        total += times.user + times.system
    return total


def measure(
    code: str,
    env: dict[str, str] | None,
    urls: list[str],
    status_port: int | None,
    args: argparse.Namespace,
) -> Window:
    """Start the endpoint of ``code``, wait ``--warmup``, measure ``--seconds``, stop it."""
    argv = [sys.executable, "-m", "ddsup", "endpoint", "--port", "0"]
    argv += ["--workers", str(args.workers)]
    argv += [a for url in urls for a in ("--lane", f"m={url}")]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    try:
        assert proc.stdout is not None
        if not proc.stdout.readline():
            raise SystemExit(f"the endpoint of {code} exited before serving")
        time.sleep(args.warmup)  # the first round of every lane's /metrics and /v1/models
        endpoint = psutil.Process(proc.pid)
        cpu0, served0, t0 = cpu_seconds(endpoint), requests_served(status_port), time.monotonic()
        time.sleep(args.seconds)
        cpu1, served1, t1 = cpu_seconds(endpoint), requests_served(status_port), time.monotonic()
        span = t1 - t0
        load = os.getloadavg()[0]
        # stub_status's own requests count too: one per reading
        fetches = (served1 - served0 - 1) / span if status_port else math.nan
        return Window(code, len(urls), 100 * (cpu1 - cpu0) / span, fetches, load)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def report(windows: list[Window], codes: list[str], sizes: list[int]) -> None:
    print(f"{'lanes':>6} {'code':>10} {'CPU % of a core':>22} {'fetches/s':>18}  load")
    for n in sizes:
        for code in codes:
            mine = [w for w in windows if w.code == code and w.lanes == n]
            cpu = [w.cpu_pct for w in mine]
            fetch = [w.fetches_per_s for w in mine]
            loads = [w.load for w in mine]
            spread = f"({min(cpu):.1f}-{max(cpu):.1f})"
            print(
                f"{n:>6} {code:>10} {statistics.median(cpu):>8.2f} {spread:>13} "
                f"{statistics.median(fetch):>10.1f}/s        {min(loads):.1f}-{max(loads):.1f}"
            )
        if len(codes) == 2:
            a, b = codes
            ma = statistics.median(w.cpu_pct for w in windows if w.code == a and w.lanes == n)
            mb = statistics.median(w.cpu_pct for w in windows if w.code == b and w.lanes == n)
            print(f"{n:>6} {a} / {b}: x {ma / mb:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lanes", default="256,1024", help="lane counts, comma-separated")
    parser.add_argument("--workers", type=int, default=1, help="endpoint workers")
    parser.add_argument("--seconds", type=float, default=20, help="measured seconds per window")
    parser.add_argument("--warmup", type=float, default=4, help="unmeasured seconds first")
    parser.add_argument("--reps", type=int, default=3, help="windows per code and lane count")
    parser.add_argument("--baseline", metavar="REV", help="also run this git revision's endpoint")
    parser.add_argument("--lane-server", choices=("nginx", "busybox"), default="nginx")
    parser.add_argument("--json", type=Path, help="write every window here")
    args = parser.parse_args()
    sizes = [int(n) for n in args.lanes.split(",")]
    windows: list[Window] = []
    with tempfile.TemporaryDirectory(prefix="ddsup-idle-sampling-") as tmp:
        codes: list[tuple[str, dict[str, str] | None]] = [("this tree", None)]
        if args.baseline:
            source = export_baseline(args.baseline, Path(tmp))
            codes.append((args.baseline, baseline_env(source)))
        socks = listening_sockets(max(sizes))
        ports = [s.getsockname()[1] for s in socks]
        status_port: int | None = None
        if args.lane_server == "nginx":
            lanes, status_port = start_lanes(ensure_nginx(), socks, Path(tmp) / "nginx")
        for sock in socks:
            sock.close()
        if status_port is None:
            boxes = BusyboxLanes(ports, Path(tmp) / "busybox")
        try:
            for n in sizes:
                urls = [f"http://127.0.0.1:{p}" for p in ports[:n]]
                for rep in range(args.reps):
                    order = codes if rep % 2 == 0 else codes[::-1]  # alternate who goes first
                    for code, env in order:
                        window = measure(code, env, urls, status_port, args)
                        windows.append(window)
                        print(
                            f"  {n} lanes, {code}: {window.cpu_pct:.2f} % of a core, "
                            f"{window.fetches_per_s:.1f} fetches/s (load {window.load:.1f})",
                            flush=True,
                        )
        finally:
            if status_port is None:
                boxes.stop()
            else:
                lanes.send_signal(signal.SIGQUIT)  # nginx: graceful stop of master and worker
                try:
                    lanes.wait(20)
                except subprocess.TimeoutExpired:
                    lanes.kill()
                    lanes.wait()
    print(
        f"\nendpoint idle, {args.workers} worker(s), {args.lane_server} lanes, "
        f"{args.seconds:g} s windows, medians:"
    )
    report(windows, [code for code, _ in codes], sizes)
    if args.json:
        args.json.write_text(json.dumps([asdict(w) for w in windows], indent=1))


if __name__ == "__main__":
    main()
