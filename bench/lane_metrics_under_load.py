"""The endpoint's queue signal from real vLLM lanes' ``/metrics`` under a burst.

Starts ``--lanes`` real vLLM lanes of the tiny test model (``.venv-vllm``, see
``scripts/setup-vllm``), the endpoint in front of them with ``--metrics-timeout``, and a
burst of ``--concurrency`` streaming chat requests through the endpoint for
``--seconds``. Meanwhile it times each lane's ``/metrics`` from outside (first byte and
whole body: what the endpoint's sampler waits for) once a second, and at the end reads
the endpoint's ``ddsup_endpoint_lane_metrics_errors_total`` (samples that failed or
missed their bound: each one is a second in which admission could not see that lane's
queue). Prints one JSON line.

    .venv/bin/python bench/lane_metrics_under_load.py [--metrics-timeout 0.5] [--lanes 2]

Everything runs on this machine: the lanes, the endpoint and the load compete for its
CPUs, as they do in a one-node run of the tests; other processes are reported as
``others_cpu`` (percent of one core) so a busy shared machine shows. Every process it
starts carries the bench mark (``side_by_side.py``): ``leftovers`` counts those still alive
at the end, killed then.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil
import trio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # in-process only: lanes must not see tests/vllm

from side_by_side import MARK, MARK_VAR, kill_marked  # noqa: E402

from support.vllm import installed_vllm  # noqa: E402 (after the path above)
from support.vllm_servers import SERVED, Server, start_server  # noqa: E402

ENDPOINT = """
import logging, sys, trio
logging.basicConfig(level=logging.WARNING, format="%(message)s")
logging.getLogger("ddsup.endpoint").setLevel(logging.DEBUG)  # the failed samples, why
from functools import partial
from ddsup.endpoint import EndpointConfig, LaneInfo, LaneTable, serve_endpoint
timeout, urls = float(sys.argv[1]), sys.argv[2:]
config = EndpointConfig(port=0, metrics_timeout=timeout, max_queue_per_lane=10_000)
lanes = [LaneInfo(instance=f"lane@{i}", model="tiny", url=u) for i, u in enumerate(urls)]
async def main():
    async with trio.open_nursery() as n:
        port = await n.start(partial(serve_endpoint, config, LaneTable(lanes)))
        print(port, flush=True)
trio.run(main)
"""


def time_metrics(url: str) -> tuple[float, float]:
    """Seconds to the first byte and to the whole body of one ``GET /metrics``."""
    host, port = url.removeprefix("http://").split(":")
    start = time.perf_counter()
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        first = None
        while sock.recv(65536):
            first = first or time.perf_counter() - start
    return first or 0.0, time.perf_counter() - start


async def burst(url: str, concurrency: int, seconds: float, tokens: int) -> dict[str, int]:
    body = {"model": SERVED, "messages": [{"role": "user", "content": "tell me a story"}],
            "max_tokens": tokens, "ignore_eos": True, "stream": True}  # fmt: skip
    counts = {"ok": 0, "other": 0, "cut": 0}
    stop_at = trio.current_time() + seconds
    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=120) as client:

        async def one() -> None:
            while trio.current_time() < stop_at:
                try:
                    async with client.stream("POST", "/v1/chat/completions", json=body) as answer:
                        async for _ in answer.aiter_bytes():
                            pass
                except httpx.TransportError:
                    counts["cut"] += 1  # a connection closed under the request
                    continue
                counts["ok" if answer.status_code == 200 else "other"] += 1

        async with trio.open_nursery() as nursery:
            for _ in range(concurrency):
                nursery.start_soon(one)
    return counts


async def probe(lanes: list[Server], seconds: float, out: list[tuple[float, float]]) -> None:
    stop_at = trio.current_time() + seconds
    while trio.current_time() < stop_at:
        for lane in lanes:
            out.append(await trio.to_thread.run_sync(time_metrics, lane.url))
        await trio.sleep(1.0)


def errors_total(endpoint: str) -> int:
    text = httpx.get(endpoint + "/metrics").text
    lines = [ln for ln in text.splitlines() if ln.startswith("ddsup_endpoint_lane_metrics_errors")]
    return sum(int(float(ln.rsplit(" ", 1)[1])) for ln in lines)


def failed_samples(log: Path) -> dict[str, int]:
    """The endpoint's reasons for its failed samples, counted (its debug lines)."""
    why: dict[str, int] = {}
    for line in log.read_text(errors="replace").splitlines():
        if "/metrics" in line:
            reason = line.split(": /metrics ", 1)[-1].split(" (", 1)[0][:80]
            why[reason] = why.get(reason, 0) + 1
    return why


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lanes", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=16, help="tokens per request")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--metrics-timeout", type=float, default=None)
    parser.add_argument(
        "--ddsup", type=Path, default=None, metavar="DIR",
        help="run the endpoint from DIR/supervisor (another revision's checkout, to compare)",
    )  # fmt: skip
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the lanes are ended below
    os.environ[MARK_VAR] = MARK  # every process started from here on carries it ...
    os.environ["SPT_NOENV"] = "1"  # ... the retitled vLLM engine too
    install = installed_vllm()
    if isinstance(install, str):
        sys.exit(install)
    logs = Path(tempfile.mkdtemp(prefix="lane-metrics-"))
    lanes = [start_server("real", install, logs / f"lane{i}.log") for i in range(args.lanes)]
    try:
        for lane in lanes:
            lane.wait_ready()
        timeout = args.metrics_timeout or default_timeout(args.ddsup)
        env = dict(os.environ)
        if args.ddsup is not None:
            env["PYTHONPATH"] = str(args.ddsup / "supervisor")
        endpoint_log = (logs / "endpoint.log").open("w")
        endpoint = subprocess.Popen(
            [sys.executable, "-c", ENDPOINT, str(timeout), *(lane.url for lane in lanes)],
            stdout=subprocess.PIPE, stderr=endpoint_log, text=True, env=env,
        )  # fmt: skip
        try:
            assert endpoint.stdout is not None
            url = f"http://127.0.0.1:{int(endpoint.stdout.readline())}"
            result = measure(url, lanes, args)
            result.update(metrics_timeout=timeout, metrics_errors=errors_total(url))
        finally:
            endpoint.kill()
            endpoint.wait()
            endpoint_log.close()
        result["why"] = failed_samples(logs / "endpoint.log")
    finally:
        for lane in lanes:
            lane.end()
    result["leftovers"] = kill_marked()
    print(json.dumps(result))


def default_timeout(ddsup: Path | None) -> float:
    """The endpoint's default ``metrics_timeout`` in the revision that will run."""
    code = "from ddsup.endpoint import EndpointConfig; print(EndpointConfig().metrics_timeout)"
    env = {**os.environ, **({"PYTHONPATH": str(ddsup / "supervisor")} if ddsup else {})}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    return float(done.stdout)


def measure(url: str, lanes: list[Server], args: argparse.Namespace) -> dict[str, object]:
    timings: list[tuple[float, float]] = []
    counts: dict[str, int] = {}
    mine = {psutil.Process().pid, *(p.pid for p in psutil.Process().children(recursive=True))}
    before = {p.pid: p.cpu_times() for p in psutil.process_iter() if p.pid not in mine}
    start = time.monotonic()

    async def run() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(probe, lanes, args.seconds, timings)
            counts.update(await burst(url, args.concurrency, args.seconds, args.max_tokens))

    trio.run(run)
    wall = time.monotonic() - start
    others = 0.0
    for proc in psutil.process_iter():
        if proc.pid in before:
            try:
                now = proc.cpu_times()
            except psutil.Error:
                continue
            others += (now.user + now.system) - (before[proc.pid].user + before[proc.pid].system)
    firsts, wholes = [t[0] for t in timings], [t[1] for t in timings]
    return {
        "lanes": args.lanes, "concurrency": args.concurrency, "seconds": args.seconds,
        "max_tokens": args.max_tokens,
        "requests": counts, "scrapes": len(timings),
        "first_byte_p50": quantile(firsts, 0.5), "first_byte_p90": quantile(firsts, 0.9),
        "whole_p50": quantile(wholes, 0.5), "whole_p90": quantile(wholes, 0.9),
        "whole_max": round(max(wholes), 3), "others_cpu": round(100 * others / wall),
    }  # fmt: skip


if __name__ == "__main__":
    main()
