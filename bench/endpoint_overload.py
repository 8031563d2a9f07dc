"""The endpoint under overload: goodput, 429 share and latency from 0.5× to 8× capacity.

Starts ``--lanes`` fake-vllm lanes with a real capacity limit (``--max-num-seqs`` slots,
each request holding one for ``--ttft`` seconds: ``--tokens-per-second 0``), the
endpoint (``ddsup endpoint --max-queue-per-lane N``) pinned to the first core, and a
load generator in its own process (trio + h11, exact counts per status and latency per
class). First a closed loop with lanes × max-queue connections measures peak goodput;
then an open loop offers each ``--levels`` multiple of that peak for ``--seconds``
(the first ``--warmup`` seconds not counted) and prints, per level: offered req/s,
goodput (2xx/s) and its share of peak, the 429 share, p50/p99 latency of 2xx answers,
p99 of 429 answers, errors (anything neither 2xx nor 429: must be 0), and the CPU of the
endpoint and of the generator (as % of one core) with the generator's p99 lateness, so a
saturated generator is visible rather than blamed on the endpoint.

    .venv/bin/python bench/endpoint_overload.py [--seconds 10] [--levels 0.5,1,2,4,8]

Goal (issue): at 4× overload goodput ≥ 90 % of peak and 429s answered in ≤ 5 ms p99.
Latency runs from the moment a request task starts (connect included when a new
connection is needed) to its last response byte; lateness is how far behind the
open-loop schedule the generator started a request.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import h11
import psutil
import trio

BODY = b'{"model":"m","prompt":"hi","max_tokens":4}'
ERROR_CAP = 20  # distinct error kinds kept


# ---------------------------------------------------------------------------- generator


@dataclass
class Tally:
    """What the generator saw in the counted window (requests started in it)."""

    started: int = 0
    ok_latency: list[float] = field(default_factory=list)
    busy_latency: list[float] = field(default_factory=list)  # 429s
    ok_in_window: int = 0  # 2xx whose answer ended inside the window: goodput
    errors: Counter[str] = field(default_factory=Counter)
    lateness: list[float] = field(default_factory=list)
    connections_opened: int = 0
    not_sent: int = 0  # the generator's own connection cap was reached
    done: int = 0  # requests that got an answer or an error


class Client:
    """Keep-alive connections to one ``host:port``, reused most recently freed first."""

    def __init__(self, host: str, port: int, max_connections: int) -> None:
        self.host, self.port = host, port
        self.max_connections = max_connections
        self.idle: list[tuple[trio.SocketStream, h11.Connection]] = []
        self.open = 0
        self.request = h11.Request(
            method="POST",
            target="/v1/completions",
            headers=[
                ("host", f"{host}:{port}"),
                ("content-type", "application/json"),
                ("content-length", str(len(BODY))),
            ],
        )

    async def exchange(self, tally: Tally) -> tuple[int, bool]:
        """One request; (status, whether a 429 carried Retry-After). Raises OSError/h11 errors."""
        if self.idle:
            stream, conn = self.idle.pop()
        else:
            self.open += 1
            tally.connections_opened += 1
            try:
                stream = await trio.open_tcp_stream(self.host, self.port)
            except BaseException:
                self.open -= 1
                raise
            conn = h11.Connection(h11.CLIENT)
        reusable = False
        try:
            data = conn.send(self.request) + conn.send(h11.Data(data=BODY))
            await stream.send_all(data + conn.send(h11.EndOfMessage()))
            status, retry_after = 0, False
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    conn.receive_data(await stream.receive_some(65536))
                elif isinstance(event, h11.Response):
                    status = event.status_code
                    retry_after = any(name == b"retry-after" for name, _ in event.headers)
                elif isinstance(event, h11.EndOfMessage):
                    break
                elif isinstance(event, h11.ConnectionClosed):
                    raise h11.RemoteProtocolError("connection closed mid-response")
            if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
                conn.start_next_cycle()
                reusable = True
            return status, retry_after
        finally:
            if reusable:
                self.idle.append((stream, conn))
            else:
                self.open -= 1
                await trio.aclose_forcefully(stream)

    def close(self) -> None:
        for stream, _ in self.idle:
            stream.socket.close()
        self.idle.clear()


async def one_request(client: Client, tally: Tally, counted: bool, window_end: float) -> None:
    start = trio.current_time()
    try:
        status, retry_after = await client.exchange(tally)
    except (OSError, trio.BrokenResourceError, h11.ProtocolError) as err:
        tally.done += 1
        if counted and len(tally.errors) < ERROR_CAP:
            tally.errors[type(err).__name__] += 1
        return
    end = trio.current_time()
    tally.done += 1
    if not counted:
        return
    if 200 <= status < 300:
        tally.ok_latency.append(end - start)
        tally.ok_in_window += end <= window_end
    elif status == 429:
        tally.busy_latency.append(end - start)
        if not retry_after:
            tally.errors["429 without Retry-After"] += 1
    else:
        tally.errors[f"HTTP {status}"] += 1


async def open_loop(client: Client, rate: float, warmup: float, seconds: float) -> Tally:
    """Start requests at ``rate``/s on a fixed schedule, whatever the answers do."""
    tally = Tally()
    t0 = trio.current_time()
    counted_from, window_end = t0 + warmup, t0 + warmup + seconds
    scope = trio.CancelScope()  # its deadline, once set, ends the drain
    spawned = 0
    with scope:
        async with trio.open_nursery() as nursery:
            i = 0
            while (due := t0 + i / rate) < window_end:
                i += 1
                now = trio.current_time()
                if due > now:
                    await trio.sleep_until(due)
                    now = trio.current_time()
                counted = due >= counted_from
                if counted and tally.started == 0:
                    print("mark start", flush=True)
                if client.open >= client.max_connections and not client.idle:
                    tally.not_sent += counted
                    continue
                if counted:
                    tally.started += 1
                    tally.lateness.append(now - due)
                spawned += 1
                nursery.start_soon(one_request, client, tally, counted, window_end)
            await trio.sleep_until(window_end)
            print("mark end", flush=True)
            scope.deadline = window_end + 5.0  # answers after the window still need a status
    if spawned > tally.done:
        tally.errors["unanswered 5 s after the window"] += spawned - tally.done
    return tally


async def closed_loop(client: Client, connections: int, warmup: float, seconds: float) -> Tally:
    """``connections`` loops, each sending its next request when the last is answered."""
    tally = Tally()
    t0 = trio.current_time()
    counted_from, window_end = t0 + warmup, t0 + warmup + seconds

    async def loop() -> None:
        while (now := trio.current_time()) < window_end:
            counted = now >= counted_from
            tally.started += counted
            await one_request(client, tally, counted, window_end)

    async with trio.open_nursery() as nursery:
        for _ in range(connections):
            nursery.start_soon(loop)
        await trio.sleep_until(counted_from)
        print("mark start", flush=True)
        await trio.sleep_until(window_end)
        print("mark end", flush=True)
    return tally


def generate(spec: dict[str, Any]) -> None:
    """The generator process: run one load level, print marks then one JSON line."""

    async def main() -> Tally:
        client = Client(spec["host"], spec["port"], spec["max_connections"])
        try:
            if spec["rate"] > 0:
                return await open_loop(client, spec["rate"], spec["warmup"], spec["seconds"])
            return await closed_loop(client, spec["closed"], spec["warmup"], spec["seconds"])
        finally:
            client.close()

    me = psutil.Process()
    tally = trio.run(main)
    cpu = sum(me.cpu_times()[:2])
    out = {
        "started": tally.started,
        "ok_latency": tally.ok_latency,
        "busy_latency": tally.busy_latency,
        "ok_in_window": tally.ok_in_window,
        "errors": dict(tally.errors),
        "late_p99": percentile(tally.lateness, 99),
        "connections_opened": tally.connections_opened,
        "not_sent": tally.not_sent,
        "cpu": cpu,
    }
    print(json.dumps(out), flush=True)


def percentile(values: list[float], pct: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(pct / 100 * len(ordered)) - 1)]


# ---------------------------------------------------------------------------- orchestration


@dataclass(frozen=True)
class Level:
    """One load level's figures (rates per second, latencies in ms, CPU in % of a core)."""

    label: str
    offered: float
    goodput: float
    busy_share: float
    ok_p50: float
    ok_p99: float
    busy_p99: float
    errors: dict[str, int]
    endpoint_cpu: float
    lanes_cpu: float
    generator_cpu: float
    late_p99: float
    not_sent: int
    connections: int


Child = subprocess.Popen[str]


def start(argv: list[str], cpus: set[int]) -> Child:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    os.sched_setaffinity(proc.pid, cpus)
    return proc


def first_line_url(proc: Child, what: str) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "http://" not in line:
        raise SystemExit(f"{what} did not start (status {proc.poll()}): {line!r}")
    return line.split()[-1]


def cpu_of(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


def run_level(label: str, spec: dict[str, Any], endpoint: psutil.Process, cpus: set[int]) -> Level:
    """Run the generator once; charge ``watched`` CPU over the counted window only.

    ``watched`` is the endpoint then the lanes: their CPU is sampled at the generator's
    window marks.
    """
    argv = [sys.executable, __file__, "--generate", json.dumps(spec)]
    gen = start(argv, cpus)
    assert gen.stdout is not None
    marks: dict[str, tuple[float, list[float]]] = {}
    result: dict[str, Any] | None = None
    for line in gen.stdout:
        if line.startswith("mark "):
            marks[line.split()[1]] = (time.monotonic(), [cpu_of(p) for p in watched])
        elif line.startswith("{"):
            result = json.loads(line)
    if gen.wait(30) != 0 or result is None or len(marks) != 2:
        raise SystemExit(f"the load generator failed at {label} (status {gen.returncode})")
    wall = marks["end"][0] - marks["start"][0]
    used = [after - before for before, after in zip(marks["start"][1], marks["end"][1])]
    seconds = spec["seconds"]
    answered = len(result["ok_latency"]) + len(result["busy_latency"])
    total_gen_seconds = spec["seconds"] + spec["warmup"]
    return Level(
        label=label,
        offered=(result["started"] + result["not_sent"]) / seconds,
        goodput=result["ok_in_window"] / seconds,
        busy_share=len(result["busy_latency"]) / answered if answered else math.nan,
        ok_p50=percentile(result["ok_latency"], 50) * 1000,
        ok_p99=percentile(result["ok_latency"], 99) * 1000,
        busy_p99=percentile(result["busy_latency"], 99) * 1000,
        errors=result["errors"],
        endpoint_cpu=100 * used[0] / wall,
        lanes_cpu=100 * sum(used[1:]) / wall,
        generator_cpu=100 * result["cpu"] / total_gen_seconds,  # start-up included: upper bound
        late_p99=result["late_p99"] * 1000,
        not_sent=result["not_sent"],
        connections=result["connections_opened"],
    )


def stop_all(children: list[Child]) -> None:
    for child in children:
        if child.poll() is None:
            child.terminate()
    for child in children:
        try:
            child.wait(10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def run(args: argparse.Namespace) -> tuple[float, list[Level]]:
    cpus = sorted(os.sched_getaffinity(0))
    endpoint_cpu, others = {cpus[0]}, set(cpus[1:]) or {cpus[0]}
    children: list[Child] = []
    try:
        lanes = []
        for i in range(args.lanes):
            argv = [sys.executable, "-m", "ddsup", "fake-vllm", "--port", "0", "--model", "m"]
            argv += ["--max-num-seqs", str(args.max_num_seqs), "--ttft", str(args.ttft)]
            argv += ["--tokens-per-second", "0", "--lane-id", f"lane{i}"]
            children.append(start(argv, others))
            lanes.append(first_line_url(children[-1], f"fake-vllm lane {i}"))
        argv = [sys.executable, "-m", "ddsup", "endpoint", "--port", "0", "--retry-after", "1s"]
        argv += ["--max-queue-per-lane", str(args.max_queue_per_lane)]
        argv += [a for lane in lanes for a in ("--lane", f"m={lane}")]
        children.append(start(argv, endpoint_cpu))
        url = first_line_url(children[-1], "the endpoint")
        watched = [psutil.Process(child.pid) for child in (children[-1], *children[:-1])]
        host, port = url.removeprefix("http://").rsplit(":", 1)
        base = {"host": host, "port": int(port), "max_connections": args.max_connections}
        base |= {"seconds": args.seconds, "warmup": args.warmup}
        closed = args.lanes * args.max_queue_per_lane
        peak = run_level(
            f"peak (closed, {closed} conns)", base | {"rate": 0, "closed": closed}, endpoint, others
        )
        levels = [peak]
        for factor in args.levels:
            spec = base | {"rate": factor * peak.goodput, "closed": 0}
            levels.append(run_level(f"{factor:g}×", spec, watched, others))
        return peak.goodput, levels
    finally:
        stop_all(children)


def report(peak: float, levels: list[Level], args: argparse.Namespace) -> None:
    capacity = args.lanes * args.max_num_seqs / args.ttft
    print(
        f"{args.lanes} fake-vllm lanes × --max-num-seqs {args.max_num_seqs}, --ttft {args.ttft:g}s "
        f"(nominal capacity {capacity:.0f} req/s); endpoint --max-queue-per-lane "
        f"{args.max_queue_per_lane}; {args.seconds:g}s per level after {args.warmup:g}s warm-up"
    )
    print(f"peak goodput (closed loop): {peak:.0f} req/s\n")
    head = (
        f"{'level':<24}{'offered':>8}{'2xx/s':>8}{'% peak':>8}{'429 %':>7}{'2xx p50':>9}"
        f"{'2xx p99':>9}{'429 p99':>9}{'errors':>7}{'ep CPU':>8}{'lanes':>7}{'gen CPU':>8}{'gen late':>9}"
    )
    print(
        head
        + "\n"
        + f"{'':<24}{'req/s':>8}{'':>8}{'':>8}{'':>7}{'ms':>9}{'ms':>9}{'ms':>9}{'':>7}{'%':>8}{'%':>7}{'%':>8}{'p99 ms':>9}"
    )
    for lv in levels:
        errors = sum(lv.errors.values())
        print(
            f"{lv.label:<24}{lv.offered:>8.0f}{lv.goodput:>8.0f}{100 * lv.goodput / peak:>8.1f}"
            f"{100 * lv.busy_share:>7.1f}{lv.ok_p50:>9.1f}{lv.ok_p99:>9.1f}{lv.busy_p99:>9.2f}"
            f"{errors:>7}{lv.endpoint_cpu:>8.0f}{lv.lanes_cpu:>7.0f}{lv.generator_cpu:>8.0f}{lv.late_p99:>9.2f}"
        )
    for lv in levels:
        if lv.errors or lv.not_sent:
            print(f"  {lv.label}: errors {lv.errors}, not sent (generator cap) {lv.not_sent}")
    print(f"connections opened per level: {[lv.connections for lv in levels]}")
    four = next((lv for lv in levels if lv.label == "4×"), None)
    if four is not None:
        share, p99 = 100 * four.goodput / peak, four.busy_p99
        verdict = "met" if share >= 90 and p99 <= 5 else "MISSED"
        print(
            f"goal at 4×: goodput {share:.1f}% of peak (≥ 90%), 429 p99 {p99:.2f} ms (≤ 5 ms): "
            f"{verdict}; machine load now {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10, help="counted seconds per level")
    parser.add_argument("--warmup", type=float, default=1, help="uncounted seconds first")
    parser.add_argument(
        "--levels",
        type=lambda text: [float(x) for x in text.split(",")],
        default=[0.5, 1, 2, 4, 8],
        help="offered load as multiples of the measured peak (comma-separated)",
    )
    parser.add_argument("--lanes", type=int, default=2)
    parser.add_argument("--max-num-seqs", type=int, default=8)
    parser.add_argument(
        "--ttft", type=float, default=0.05, help="seconds each request holds a slot"
    )
    parser.add_argument("--max-queue-per-lane", type=int, default=16)
    parser.add_argument("--max-connections", type=int, default=2048, help="the generator's cap")
    parser.add_argument("--generate", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.generate:
        generate(json.loads(args.generate))
    else:
        report(*run(args), args)


if __name__ == "__main__":
    main()
