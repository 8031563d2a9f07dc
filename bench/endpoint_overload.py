"""The endpoint under overload: goodput, 429 share and latency from 0.5× to 8× capacity.

Starts ``--lanes`` fake-vllm lanes with a real capacity limit (``--max-num-seqs`` slots,
each request holding one for ``--ttft`` seconds: ``--tokens-per-second 0``), the
endpoint (``ddsup endpoint --max-queue-per-lane N``) pinned to the first core, a load
generator in its own process (trio, keep-alive connections, a minimal HTTP/1.1 reader:
exact counts per status and latency per class) and a probe (below). First a closed loop
with lanes × max-queue connections measures peak goodput; then an open loop offers each
``--levels`` multiple of that peak for ``--seconds`` (the first ``--warmup`` seconds not
counted) and prints, per level: offered req/s, goodput (2xx/s) and its share of peak,
the 429 share, p50/p99 latency of 2xx answers, p99 of 429 answers as the generator and
as the probe saw them, errors (anything neither 2xx nor 429: must be 0), and the CPU of
the endpoint (also per answered request), the lanes, the generator and every other
process on the machine (as % of one core), with the generator's p99 lateness, so a
saturated generator or a busy shared machine is visible rather than blamed on the
endpoint.

    .venv/bin/python bench/endpoint_overload.py [--seconds 20] [--levels 0.5,1,2,4,8]

The defaults model GPU lanes: capacity is bounded by slots and time per request (2 lanes
× 32 slots / 0.5 s = 128 req/s), not by this machine's CPU. Shorter ``--ttft`` makes the
lanes' own HTTP work (fake-vllm on hypercorn, ~2 ms CPU per request here) compete with the
endpoint and the generator for two cores, which measures the machine, not admission.

Goal: at 4× overload goodput ≥ 90 % of peak and 429s answered in ≤ 5 ms p99.
The goal is judged on the probe: one request every ``--probe-interval`` seconds (counted
in the offered load) from a process that sleeps between events, so its latencies are the
endpoint's answer time. The generator's latencies also hold its own event loop's delays
(hundreds of connections); they run from the moment a request task starts (connect
included when a new connection is needed) to its last response byte; lateness is how far
behind the open-loop schedule the generator started a request.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import selectors
import socket
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, cast

import psutil
import trio

BODY = b'{"model":"m","prompt":"hi","max_tokens":4}'
ERROR_CAP = 20  # distinct error kinds kept


# ---------------------------------------------------------------------------- generator


class BadResponse(Exception):
    """The answer was not HTTP/1.1 this generator can frame (counted as an error)."""


@dataclass
class Tally:
    """What the generator saw for the requests due inside the counted window."""

    started: int = 0
    ok_latency: list[float] = field(default_factory=list)
    busy_latency: list[float] = field(default_factory=list)  # 429s
    ok_in_window: int = 0  # 2xx whose answer ended inside the window: goodput
    errors: Counter[str] = field(default_factory=Counter)
    lateness: list[float] = field(default_factory=list)
    connections_opened: int = 0
    not_sent: int = 0  # due but never sent: every connection was busy until the window ended


class Connection:
    """One keep-alive connection with a minimal HTTP/1.1 response reader.

    Hand-framed rather than h11: on these 2-core machines the generator's own cost per
    request decides how far it can push, and h11's state machine costs more than the
    endpoint's answer. Answers must carry ``content-length`` or be chunked; anything
    else raises :class:`BadResponse`.
    """

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buf = bytearray()

    async def exchange(self, request: bytes) -> tuple[int, bool, bool]:
        """Send ``request``; (status, has Retry-After, connection reusable)."""
        await self.stream.send_all(request)
        end = await self._find(b"\r\n\r\n")
        lines = bytes(self.buf[:end]).split(b"\r\n")
        del self.buf[: end + 4]
        try:
            status = int(lines[0].split(b" ", 2)[1])
        except (IndexError, ValueError) as err:
            raise BadResponse(f"bad status line {lines[0]!r}") from err
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip().lower()
        if b"content-length" in headers:
            await self._skip(int(headers[b"content-length"]))
        elif headers.get(b"transfer-encoding") == b"chunked":
            while True:
                end = await self._find(b"\r\n")
                size = int(bytes(self.buf[:end]).split(b";")[0], 16)
                del self.buf[: end + 2]
                await self._skip(size + 2)  # data and its CRLF; after size 0: the final CRLF
                if size == 0:
                    break
        else:
            raise BadResponse("an answer with neither content-length nor chunks")
        return status, b"retry-after" in headers, headers.get(b"connection") != b"close"

    async def _find(self, separator: bytes) -> int:
        while (at := self.buf.find(separator)) < 0:
            await self._receive()
        return at

    async def _skip(self, count: int) -> None:
        while len(self.buf) < count:
            await self._receive()
        del self.buf[:count]

    async def _receive(self) -> None:
        data = await self.stream.receive_some(65536)
        if not data:
            raise BadResponse("connection closed mid-response")
        self.buf += data


FAILURES = (OSError, trio.BrokenResourceError, BadResponse, ValueError)


class Worker:
    """One connection's loop: sends the requests it is given, one at a time."""

    def __init__(self, host: str, port: int, tally: Tally, window_end: float) -> None:
        self.host, self.port = host, port
        self.tally = tally
        self.window_end = window_end
        self.request = (
            f"POST /v1/completions HTTP/1.1\r\nhost: {host}:{port}\r\n"
            f"content-type: application/json\r\ncontent-length: {len(BODY)}\r\n\r\n"
        ).encode() + BODY
        self.conn: Connection | None = None

    async def connect(self) -> None:
        self.conn = Connection(await trio.open_tcp_stream(self.host, self.port))
        self.tally.connections_opened += 1

    async def one(self, counted: bool) -> None:
        tally = self.tally
        start = trio.current_time()
        try:
            if self.conn is None:
                await self.connect()
            assert self.conn is not None
            status, retry_after, keep = await self.conn.exchange(self.request)
        except FAILURES as err:
            self.close()
            if counted and len(tally.errors) < ERROR_CAP:
                tally.errors[type(err).__name__] += 1
            return
        except trio.Cancelled:  # the drain after the window ran out
            tally.errors["unanswered 5 s after the window"] += counted
            raise
        end = trio.current_time()
        if not keep:
            self.close()
        if not counted:
            return
        if 200 <= status < 300:
            tally.ok_latency.append(end - start)
            tally.ok_in_window += end <= self.window_end
        elif status == 429:
            tally.busy_latency.append(end - start)
            if not retry_after:
                tally.errors["429 without Retry-After"] += 1
        else:
            tally.errors[f"HTTP {status}"] += 1

    def close(self) -> None:
        if self.conn is not None:
            self.conn.stream.socket.close()
            self.conn = None


async def open_loop(spec: dict[str, Any]) -> Tally:
    """Requests fall due at ``rate``/s on a fixed schedule, whatever the answers do.

    ``connections`` workers take due requests in order; a request that waits for a free
    worker shows as lateness, and one still waiting when the window ends is not sent.
    """
    tally = Tally()
    rate, warmup, seconds = spec["rate"], spec["warmup"], spec["seconds"]
    workers = [
        Worker(spec["host"], spec["port"], tally, math.inf) for _ in range(spec["connections"])
    ]
    for worker in workers:
        await worker.connect()
    send, receive = trio.open_memory_channel[tuple[float, bool]](math.inf)
    t0 = trio.current_time()
    counted_from, window_end = t0 + warmup, t0 + warmup + seconds
    for worker in workers:
        worker.window_end = window_end

    async def serve(worker: Worker) -> None:
        async for due, counted in receive:
            now = trio.current_time()
            if now >= window_end:
                tally.not_sent += counted
                continue
            if counted:
                tally.started += 1
                tally.lateness.append(now - due)
            await worker.one(counted)

    with trio.CancelScope() as scope:  # its deadline, once set, ends the drain
        async with trio.open_nursery() as nursery:
            for worker in workers:
                nursery.start_soon(serve, worker)
            i, marked = 0, False
            while (due := t0 + i / rate) < window_end:
                now = trio.current_time()
                while due <= now and due < window_end:  # 1 ms ticks: one wake-up per batch
                    send.send_nowait((due, due >= counted_from))
                    i += 1
                    due = t0 + i / rate
                if not marked and now >= counted_from:
                    marked = True
                    print(f"mark start {time.process_time()}", flush=True)
                await trio.sleep_until(max(due, now + 0.001))
            send.close()
            await trio.sleep_until(window_end)
            print(f"mark end {time.process_time()}", flush=True)
            scope.deadline = window_end + 5.0  # answers after the window still need a status
    for worker in workers:
        worker.close()
    return tally


async def closed_loop(spec: dict[str, Any]) -> Tally:
    """``closed`` workers, each sending its next request when the last is answered."""
    tally = Tally()
    t0 = trio.current_time()
    counted_from, window_end = t0 + spec["warmup"], t0 + spec["warmup"] + spec["seconds"]
    workers = [Worker(spec["host"], spec["port"], tally, window_end) for _ in range(spec["closed"])]

    async def loop(worker: Worker) -> None:
        while (now := trio.current_time()) < window_end:
            counted = now >= counted_from
            tally.started += counted
            await worker.one(counted)

    async with trio.open_nursery() as nursery:
        for worker in workers:
            nursery.start_soon(loop, worker)
        await trio.sleep_until(counted_from)
        print(f"mark start {time.process_time()}", flush=True)
        await trio.sleep_until(window_end)
        print(f"mark end {time.process_time()}", flush=True)
    for worker in workers:
        worker.close()
    return tally


def generate(spec: dict[str, Any]) -> None:
    """The generator process: run one load level, print marks then one JSON line."""
    tally = trio.run(open_loop if spec["rate"] > 0 else closed_loop, spec)
    out = {
        "started": tally.started,
        "ok_latency": tally.ok_latency,
        "busy_latency": tally.busy_latency,
        "ok_in_window": tally.ok_in_window,
        "errors": dict(tally.errors),
        "late_p99": percentile(tally.lateness, 99),
        "connections_opened": tally.connections_opened,
        "not_sent": tally.not_sent,
    }
    print(json.dumps(out), flush=True)


def probe(spec: dict[str, Any]) -> None:
    """The probe process: a request every ``interval`` seconds, timed apart from the generator.

    The generator's own event loop, busy with hundreds of connections, adds its delays
    to every latency it records (its lateness column shows how much). The probe is a
    plain ``selectors`` loop over the few connections it needs (an admitted request
    holds one for the lane's whole answer), asleep between events, so the kernel wakes
    it as soon as an answer arrives: its 429 latencies are the endpoint's answer time.
    It runs at nice -10 where it may (root), so that the lanes and the generator
    sharing its core do not delay its wake-ups. Its ``1 / interval`` requests per
    second are part of the offered load.
    """
    host, port, interval = spec["host"], spec["port"], spec["probe_interval"]
    with contextlib.suppress(PermissionError):  # the instrument first, where allowed (root)
        os.setpriority(os.PRIO_PROCESS, 0, -10)
    request = (
        f"POST /v1/completions HTTP/1.1\r\nhost: {host}:{port}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(BODY)}\r\n\r\n"
    ).encode() + BODY
    latency: dict[str, list[float]] = {}
    idle: list[socket.socket] = []
    busy: dict[socket.socket, tuple[float, bytearray]] = {}
    selector = selectors.DefaultSelector()
    begin = time.monotonic() + spec["warmup"]
    end = begin + spec["seconds"]
    due = begin
    while (now := time.monotonic()) < end or busy:
        if now >= due and now < end:
            due += interval
            sock = idle.pop() if idle else socket.create_connection((host, port))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            busy[sock] = (time.perf_counter(), bytearray())
            selector.register(sock, selectors.EVENT_READ)
            sock.sendall(request)
        wait = max(0.0, due - time.monotonic()) if now < end else 10.0
        for key, _ in selector.select(wait):
            sock = cast(socket.socket, key.fileobj)
            started, buf = busy[sock]
            data = sock.recv(65536)
            buf += data
            answer = _probe_answer(buf) if data else (0, False)
            if answer is None:
                continue
            status, keep = answer
            latency.setdefault(str(status), []).append(time.perf_counter() - started)
            selector.unregister(sock)
            del busy[sock]
            if keep:
                idle.append(sock)
            else:
                sock.close()
    print(json.dumps(latency), flush=True)


def _probe_answer(buf: bytearray) -> tuple[int, bool] | None:
    """(status, keep-alive) once ``buf`` holds a whole content-length-framed answer."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return None
    lines = bytes(buf[:end]).split(b"\r\n")
    headers = dict(line.lower().split(b":", 1) for line in lines[1:])
    if len(buf) < end + 4 + int(headers.get(b"content-length", b"0")):
        return None
    return int(lines[0].split()[1]), headers.get(b"connection", b"").strip() != b"close"


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
    probe_busy_p99: float  # 429s seen by the probe (the endpoint's answer time)
    probe_busy: int
    errors: dict[str, int]
    endpoint_cpu: float
    endpoint_us: float  # endpoint CPU per answered request
    others_cpu: float  # every other process on the machine (shared machines)
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


def machine_busy() -> float:
    """CPU seconds the machine's CPUs ran processes or were stolen, since boot.

    Interrupt time is left out: loopback traffic runs partly in softirq, charged to no
    process, and would otherwise show as "others" exactly when the load is highest.
    """
    times = psutil.cpu_times()
    left_out = ("idle", "iowait", "irq", "softirq", "guest", "guest_nice")
    return float(sum(times) - sum(getattr(times, name, 0.0) for name in left_out))


def cpu_of(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


def run_level(
    label: str, spec: dict[str, Any], watched: list[psutil.Process], cpus: set[int]
) -> Level:
    """Run the generator once; charge ``watched`` CPU over the counted window only.

    ``watched`` is the endpoint then the lanes: their CPU is sampled at the generator's
    window marks.
    """
    argv = [sys.executable, __file__, "--generate", json.dumps(spec)]
    gen = start(argv, cpus)
    probing = spec["rate"] > 0  # in a closed loop it would take a worker's place
    prober = (
        start([sys.executable, __file__, "--probe", json.dumps(spec)], cpus) if probing else None
    )
    assert gen.stdout is not None
    marks: dict[str, tuple[float, float, list[float]]] = {}
    result: dict[str, Any] | None = None
    try:
        for line in gen.stdout:
            if line.startswith("mark "):
                _, which, generator_cpu = line.split()
                used = [cpu_of(p) for p in watched] + [machine_busy()]
                marks[which] = (time.monotonic(), float(generator_cpu), used)
            elif line.startswith("{"):
                result = json.loads(line)
        gen.wait(30)
        probed: dict[str, list[float]] = {}
        if prober is not None:
            assert prober.stdout is not None
            probed = json.loads(prober.stdout.readline() or "{}")
            prober.wait(30)
    finally:
        stop_all([gen] if prober is None else [gen, prober])  # only does something when interrupted
    if gen.returncode != 0 or result is None or len(marks) != 2:
        raise SystemExit(f"the load generator failed at {label} (status {gen.returncode})")
    wall = marks["end"][0] - marks["start"][0]
    used = [
        after - before for before, after in zip(marks["start"][2], marks["end"][2], strict=True)
    ]
    seconds = spec["seconds"]
    generator = marks["end"][1] - marks["start"][1]
    answered = len(result["ok_latency"]) + len(result["busy_latency"])
    return Level(
        label=label,
        offered=(result["started"] + result["not_sent"] + sum(map(len, probed.values()))) / seconds,
        goodput=(result["ok_in_window"] + len(probed.get("200", []))) / seconds,
        busy_share=len(result["busy_latency"]) / answered if answered else math.nan,
        ok_p50=percentile(result["ok_latency"], 50) * 1000,
        ok_p99=percentile(result["ok_latency"], 99) * 1000,
        busy_p99=percentile(result["busy_latency"], 99) * 1000,
        probe_busy_p99=percentile(probed.get("429", []), 99) * 1000,
        probe_busy=len(probed.get("429", [])),
        errors=result["errors"],
        endpoint_cpu=100 * used[0] / wall,
        others_cpu=100 * (used[-1] - sum(used[:-1]) - generator) / wall,
        endpoint_us=1e6 * used[0] / max(1, answered) * seconds / wall,
        lanes_cpu=100 * sum(used[1:-1]) / wall,
        generator_cpu=100 * generator / wall,
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
    if args.spread:
        others = set(cpus)
    children: list[Child] = []
    try:
        lanes = []
        for i in range(args.lanes):
            argv = [sys.executable, "-m", "ddsup", "fake-vllm", "--port", "0", "--model", "m"]
            argv += ["--max-num-seqs", str(args.max_num_seqs), "--ttft", str(args.ttft)]
            argv += ["--tokens-per-second", "0", "--lane-id", f"lane{i}"]
            children.append(start(argv, others))
            lanes.append(first_line_url(children[-1], f"fake-vllm lane {i}"))
        endpoints: dict[str, tuple[dict[str, Any], list[psutil.Process]]] = {}
        for mode in args.gc:  # one endpoint per collector mode; only one gets load at a time
            argv = [sys.executable, "-m", "ddsup", "endpoint", "--port", "0", "--gc", mode]
            argv += ["--retry-after", "1s", "--max-queue-per-lane", str(args.max_queue_per_lane)]
            argv += [a for lane in lanes for a in ("--lane", f"m={lane}")]
            children.append(start(argv, endpoint_cpu))
            url = first_line_url(children[-1], "the endpoint")
            host, port = url.removeprefix("http://").rsplit(":", 1)
            base = {"host": host, "port": int(port), "connections": args.connections}
            base |= {"seconds": args.seconds, "warmup": args.warmup}
            base |= {"probe_interval": args.probe_interval}
            lane_processes = [psutil.Process(child.pid) for child in children[: args.lanes]]
            endpoints[mode] = (base, [psutil.Process(children[-1].pid), *lane_processes])
        closed = args.lanes * args.max_queue_per_lane
        base, watched = endpoints[args.gc[0]]
        peak = run_level(
            f"peak (closed, {closed} conns)", base | {"rate": 0, "closed": closed}, watched, others
        )
        levels = [peak]
        for factor in args.levels:
            # the probe's requests are part of the offered load, not on top of it
            rate = max(1.0, factor * peak.goodput - 1 / args.probe_interval)
            for mode, (base, watched) in endpoints.items():
                label = f"{factor:g}×" if len(endpoints) == 1 else f"{factor:g}× gc {mode}"
                levels.append(run_level(label, base | {"rate": rate, "closed": 0}, watched, others))
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
    print(f"peak goodput (closed loop): {peak:.0f} req/s")
    print(
        "CPU in % of one core over each counted window; 'others' = every other process on\n"
        f"this machine ({os.cpu_count()} CPUs; steal in, interrupts out): high = noisy figures.\n"
    )
    columns = [
        ("level", "", 24), ("offered", "req/s", 8), ("2xx/s", "", 8), ("% peak", "", 8),
        ("429 %", "", 7), ("2xx p50", "ms", 9), ("2xx p99", "ms", 9), ("429 p99", "ms", 9),
        ("probe 429", "p99 ms", 10), ("errors", "", 7), ("ep CPU", "%", 8), ("ep µs", "/req", 7),
        ("lanes", "%", 7), ("gen CPU", "%", 8), ("gen late", "p99 ms", 9), ("others", "%", 8),
    ]  # fmt: skip
    for row in (0, 1):
        first = f"{columns[0][row]:<24}"
        print(first + "".join(f"{col[row]:>{col[2]}}" for col in columns[1:]))
    for lv in levels:
        errors = sum(lv.errors.values())
        print(
            f"{lv.label:<24}{lv.offered:>8.0f}{lv.goodput:>8.0f}{100 * lv.goodput / peak:>8.1f}"
            f"{100 * lv.busy_share:>7.1f}{lv.ok_p50:>9.1f}{lv.ok_p99:>9.1f}{lv.busy_p99:>9.2f}"
            f"{lv.probe_busy_p99:>10.2f}{errors:>7}{lv.endpoint_cpu:>8.0f}{lv.endpoint_us:>7.0f}{lv.lanes_cpu:>7.0f}"
            f"{lv.generator_cpu:>8.0f}{lv.late_p99:>9.2f}{lv.others_cpu:>8.0f}"
        )
    for lv in levels:
        if lv.errors or lv.not_sent:
            print(f"  {lv.label}: errors {lv.errors}, not offered (generator behind) {lv.not_sent}")
    print(f"connections opened per level: {[lv.connections for lv in levels]}")
    for four in (lv for lv in levels if lv.label.split()[0] == "4×"):
        share, p99 = 100 * four.goodput / peak, four.probe_busy_p99
        verdict = "met" if share >= 90 and p99 <= 5 else "MISSED"
        print(
            f"goal at {four.label}: goodput {share:.1f}% of peak (≥ 90%), 429 p99 {p99:.2f} ms by the "
            f"probe ({four.probe_busy} 429s; generator's: {four.busy_p99:.2f}) (≤ 5 ms): "
            f"{verdict}; machine load now {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20, help="counted seconds per level")
    parser.add_argument("--warmup", type=float, default=1, help="uncounted seconds first")
    parser.add_argument(
        "--levels",
        type=lambda text: [float(x) for x in text.split(",")],
        default=[0.5, 1, 2, 4, 8],
        help="offered load as multiples of the measured peak (comma-separated)",
    )
    parser.add_argument("--lanes", type=int, default=2)
    parser.add_argument("--max-num-seqs", type=int, default=32)
    parser.add_argument("--ttft", type=float, default=0.5, help="seconds each request holds a slot")
    parser.add_argument("--max-queue-per-lane", type=int, default=64)
    parser.add_argument(
        "--connections", type=int, default=256, help="the generator's connections (open loop)"
    )
    parser.add_argument(
        "--spread",
        action="store_true",
        help="let the lanes and the generator run on every core, the endpoint's too",
    )
    parser.add_argument(
        "--probe-interval",
        type=float,
        default=0.05,
        help="seconds between probe requests (part of the offered load)",
    )
    parser.add_argument(
        "--gc",
        type=lambda text: text.split(","),
        default=["paced"],
        help="the endpoint's --gc; 'paced,automatic' runs each level against both",
    )
    parser.add_argument("--generate", help=argparse.SUPPRESS)
    parser.add_argument("--probe", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.generate:
        generate(json.loads(args.generate))
    elif args.probe:
        probe(json.loads(args.probe))
    else:
        report(*run(args), args)


if __name__ == "__main__":
    main()
