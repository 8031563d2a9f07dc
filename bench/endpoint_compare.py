"""The endpoint side by side with nginx and the bare trio floors, in one run, on pinned cores.

Every variant runs in front of the same upstream lanes with wrk on the same core(s) (on
4 cores or more, cores of their own: ``core_layout``):

- ``nginx 1w``: Debian's nginx, one worker pinned to the proxy core (least_conn,
  keep-alive to the lanes, no buffering); ``nginx 2w``: two workers, one per core;
- ``endpoint 1w`` / ``endpoint 2w``: ``ddsup endpoint --workers 1|2`` (the whole
  process tree is charged: parent and workers);
- ``floor h11`` / ``floor httptools``: a bare trio server answering a fixed body, parsing
  with h11 or with httptools (the floor of a Python server, not a proxy);
- ``direct``: wrk against a lane itself;
- ``prefix 1w``: ``ddsup endpoint --routing prefix``, one worker, for plain requests
  (one prompt: prefix routing keeps it on one lane until load balance moves it) and for
  templated prompts (64 shared prefixes of about 300 tokens, records after them, in
  turn), beside ``endpoint 1w`` (least-load) and ``nginx 1w`` on the same prompts: what
  keying and matching a prompt cost per request;
- with ``--baseline REV`` (a git revision, e.g. ``main``): ``REV 1w`` / ``REV 2w``, the
  endpoint of that revision (``side_by_side.py``), run beside this tree's in the same
  rotations: a change's before and after, side by side in one run.

For plain requests (two fast lanes, ``Upstream`` of ``endpoint_servers.py``) and for SSE
(``--events`` events ``--gap`` s apart) it prints req/s, p50/p99, CPU per request (user +
system of the serving processes), CPU per event (SSE minus plain, per event: the
goal's definition, which charges any per-request cost of SSE to its events; with
``--more-events N`` also the marginal cost, the slope between requests of ``--events``
and of N events) and the regime: the serving processes' share of the cores they are pinned to, so a figure taken
at saturation is told apart from one taken below it, and the load's own CPU per request
(wrk's and the lanes'): where the load shares the 2-worker variants' cores (fewer than 4
cores), the most two workers can give there follows from it (those cores' seconds over
a request's whole cost on them), printed beside the 2-worker goal. Then goodput in front of lanes
modelled as GPU-bound (``ddsup fake-vllm`` with ``--max-num-seqs`` slots held ``--ttft``
seconds each): 2xx/s through nginx and through the endpoint at the same concurrency,
at 1× and 4× their capacity (open loop: ``endpoint_overload.py``'s generator). The
last lines check the endpoint's goals and say "met" or "missed".

    .venv/bin/python bench/endpoint_compare.py [--seconds 5] [--reps 3] [--baseline main]

Needs wrk and nginx (``apt-get install -y nginx wrk``); takes about 10 minutes.

Prefix-aware routing beside least-load, in one run (neither part needs wrk or nginx):

- ``--only prefix``: two lanes of the CPU build of vLLM serving the tiny model of the
  real-vLLM tests (``tests/support/vllm.py``, ``.venv-vllm``), and two endpoints in front
  of both (``ddsup endpoint --routing least-load`` and ``--routing prefix``). The workload
  is a templated job, as Data Designer sends one: ``--templates`` shared prefixes of about
  ``--prefix-tokens`` tokens, ``--records`` records after each (a short line of their
  own), in a random order, ``--concurrency`` requests in flight. The policies take turns
  (``--reps`` each); before each turn the lanes' prefix caches are emptied (``POST
  /reset_prefix_cache``, vLLM's dev mode) and the templates are new, so every turn starts
  cold. Per turn: the prefill tokens the lanes computed (their
  ``vllm:prefix_cache_queries_total`` minus ``…_hits_total``), the hit rate, requests per
  second and balance: each lane's mean requests in flight through the endpoint, and the
  share of samples (every 0.2 s) in which one lane sat idle (nothing running or waiting
  in vLLM) while requests queued (in the other lane, or in the endpoint waiting for a
  free slot under ``--max-in-flight-per-lane``), by cause: every request was sent already (the
  turn's tail), the endpoint had sent the idle lane nothing, or it had and vLLM did not
  show it yet (between the endpoint and vLLM's engine), each such sample with what each
  lane had (in flight through the endpoint: running + waiting in vLLM), and the choices
  prefix routing made, by why. ``--variant NAME=FLAGS`` (repeatable) adds an endpoint
  routing by prefix with other ``ddsup endpoint`` flags (its thresholds) to the turns,
  so that settings are compared on the same lanes under the same load. ``--kv-blocks N``
  gives each lane a KV cache of N blocks (``--num-gpu-blocks-override``): one that holds
  the running requests and only some of the templates, as a GPU's does under a real job;
  0 keeps vLLM's default, which holds everything this workload sends.
- ``--only prefix-scale``: ``--lanes`` (64) ``ddsup fake-vllm`` lanes and the same two
  endpoints; the endpoint's CPU per request (user + system of its process) under each
  policy with templated requests (64 templates), and its resident memory, with the
  ``--variant`` endpoints too (``--max-in-flight-per-lane 1`` with more requests in flight
  than lanes: the cost of requests that wait for a free slot); then the index alone, in this process: the cost of a request's keys and of the choice at 64 lanes with
  the index at its bound.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import queue
import random
import re
import resource
import shlex
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from endpoint_overload import run_level
from endpoint_servers import (
    Child,
    cpu_time,
    ensure_nginx,
    first_line_url,
    server_argv,
    start,
    start_nginx,
    stop_all,
    wait_port,
    wrk,
)
from side_by_side import baseline_code, baseline_env, marked_process, rotations

from ddsup.endpoint import LaneInfo, LaneTable
from ddsup.endpoint._prefix_routing import PrefixIndex, PrefixPolicy, PrefixRouter, prompt_keys

PLAIN = '{"model":"m","prompt":"hi","max_tokens":16}'
STREAM = '{"model":"m","prompt":"hi","stream":true}'
STREAM_MORE = '{"model":"m","prompt":"hi","stream":true,"events":%d}'
# A templated job's requests, sent in turn: 64 templates of about 300 tokens (1,200
# characters: the prefix router keys about ten blocks of each), 8 records after each.
TEMPLATED = [
    json.dumps({"model": "m", "prompt": f"Task {t}. {rules} Record {r}: a line.", "max_tokens": 16})
    for rules in [" ".join(f"rule {i}: answer as a careful editor would." for i in range(24))]
    for r in range(8)
    for t in range(64)
]


@dataclass(frozen=True)
class Sample:
    """One wrk run against one variant."""

    requests: int
    ok: int
    seconds: float
    p50_ms: float
    p99_ms: float
    cpu_s: float
    load_cpu_s: float  # wrk's and the lanes' (the load's own cost, for the 2-core ceiling)

    @property
    def rps(self) -> float:
        return self.requests / self.seconds

    @property
    def goodput(self) -> float:
        return self.ok / self.seconds

    @property
    def cpu_us(self) -> float:
        return self.cpu_s / max(1, self.requests) * 1e6

    @property
    def load_us(self) -> float:
        return self.load_cpu_s / max(1, self.requests) * 1e6


@dataclass(frozen=True)
class Variant:
    name: str
    url: str
    cores: frozenset[int]
    serving: tuple[psutil.Process, ...]


def measure(
    v: Variant,
    body: str | Sequence[str],
    seconds: float,
    connections: int,
    cpus: set[int],
    lanes: tuple[psutil.Process, ...] = (),
) -> Sample:
    """One wrk run; the CPU of the variant's processes and, apart, of the load (wrk, the
    only child reaped meanwhile, and ``lanes``)."""
    before, load_before = cpu_time(v.serving), cpu_time(lanes) + _reaped_cpu()
    run = wrk(f"{v.url}/v1/completions", body, seconds, connections, cpus)
    cpu = cpu_time(v.serving) - before
    load = cpu_time(lanes) + _reaped_cpu() - load_before
    if run.socket_errors:
        print(f"  ({v.name}: {run.socket_errors})", file=sys.stderr)
    ok = run.requests - run.non2xx
    return Sample(run.requests, ok, run.seconds, run.p50_ms, run.p99_ms, cpu, load)


def _reaped_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def endpoint(
    lanes: list[str], workers: int, cores: set[int], *extra: str, source: Path | None = None
) -> tuple[Child, str]:
    """``ddsup endpoint`` of this tree, or of the ``supervisor/`` tree at ``source``."""
    argv = [sys.executable, "-m", "ddsup", "endpoint", "--port", "0", "--workers", str(workers)]
    argv += [a for lane in lanes for a in ("--lane", f"m={lane}")]
    env = None if source is None else baseline_env(source)
    proc = start([*argv, *extra], cores, env)
    url = first_line_url(proc)
    for child in psutil.Process(proc.pid).children():  # the workers inherit the parent's
        os.sched_setaffinity(child.pid, cores)  # affinity already; say it explicitly
    return proc, url


def core_layout() -> tuple[set[int], set[int], set[int]]:
    """(one proxy core, the two cores of the 2-worker variants, the cores of wrk and the
    lanes). With 4 cores or more the load never shares a proxy's core, so a proxy's
    scaling to its second core is not capped by wrk and the lanes on that core (a
    2-core machine has no such room: the load then shares the second core)."""
    cpus = sorted(os.sched_getaffinity(0))
    rest = cpus[2:] if len(cpus) >= 4 else cpus[1:]
    return {cpus[0]}, set(cpus[:2]), set(rest) or {cpus[0]}


def run_cpu(args: argparse.Namespace, tmp: Path, children: list[Child]) -> dict[str, Any]:
    """Plain and SSE side by side, fast lanes: CPU per request and per event, req/s, p50/p99."""
    proxy, both, load = core_layout()
    lanes = []
    for i in range(args.lanes):
        port_file = tmp / f"up{i}"
        up = server_argv("upstream", port_file, "--events", str(args.events))
        children.append(start([*up, "--gap", str(args.gap)], load))
        lanes.append(port_file)
    lane_urls = [f"http://127.0.0.1:{wait_port(p)}" for p in lanes]
    lane0 = psutil.Process(children[0].pid)
    lane_procs = tuple(psutil.Process(child.pid) for child in children[: args.lanes])
    children.append(h11 := start(server_argv("floor-h11", tmp / "h11"), proxy))
    children.append(ht := start(server_argv("floor-httptools", tmp / "ht"), proxy))
    floor_proxies = {}
    for kind in ("tasks", "epoll"):
        argv = server_argv(f"floor-{kind}", tmp / f"fp-{kind}", *lane_urls)
        floor_proxies[kind] = start(argv, proxy)
        children.append(floor_proxies[kind])
    nginx = ensure_nginx()
    n1, n1_url = start_nginx(nginx, lane_urls, sorted(proxy), tmp)
    n2, n2_url = start_nginx(nginx, lane_urls, sorted(both), tmp)
    e1, e1_url = endpoint(lane_urls, 1, proxy)
    e2, e2_url = endpoint(lane_urls, 2, both)
    p1, p1_url = endpoint(lane_urls, 1, proxy, "--routing", "prefix")
    children += [n1, n2, e1, e2, p1]
    before: list[Variant] = []
    if args.baseline:
        source = baseline_code(args.baseline, tmp / "baseline")
        b1, b1_url = endpoint(lane_urls, 1, proxy, source=source)
        b2, b2_url = endpoint(lane_urls, 2, both, source=source)
        children += [b1, b2]
        before = [
            Variant(f"{args.baseline} 1w", b1_url, frozenset(proxy), (psutil.Process(b1.pid),)),
            Variant(f"{args.baseline} 2w", b2_url, frozenset(both), (psutil.Process(b2.pid),)),
        ]

    def of(*procs: Child) -> tuple[psutil.Process, ...]:
        return tuple(psutil.Process(p.pid) for p in procs)

    plain = [
        Variant("direct", lane_urls[0], frozenset(load), (lane0,)),
        Variant("nginx 1w", n1_url, frozenset(proxy), of(n1)),
        Variant("endpoint 1w", e1_url, frozenset(proxy), of(e1)),
        Variant("prefix 1w", p1_url, frozenset(proxy), of(p1)),
        Variant(
            "floor h11", f"http://127.0.0.1:{wait_port(tmp / 'h11')}", frozenset(proxy), of(h11)
        ),
        Variant(
            "floor httptools", f"http://127.0.0.1:{wait_port(tmp / 'ht')}", frozenset(proxy), of(ht)
        ),
        *(
            Variant(
                f"floor proxy {kind}",
                f"http://127.0.0.1:{wait_port(tmp / f'fp-{kind}')}",
                frozenset(proxy),
                of(child),
            )
            for kind, child in floor_proxies.items()
        ),
        Variant("nginx 2w", n2_url, frozenset(both), of(n2)),
        Variant("endpoint 2w", e2_url, frozenset(both), of(e2)),
        *before,
    ]
    sse_names = {"direct", "nginx 1w", "endpoint 1w", "nginx 2w", "endpoint 2w"}
    sse_names |= {"floor proxy tasks", "floor proxy epoll"}
    sse = [v for v in plain if v.name in sse_names or v in before]
    templated = [v for v in plain if v.name in {"nginx 1w", "endpoint 1w", "prefix 1w"}]
    results: dict[str, dict[str, list[Sample]]] = {
        "plain": {}, "templated": {}, "sse": {}, "sse_more": {}
    }  # fmt: skip
    phases: list[tuple[str, list[Variant], str | list[str]]] = [
        ("plain", plain, PLAIN), ("templated", templated, TEMPLATED), ("sse", sse, STREAM)
    ]  # fmt: skip
    if args.more_events:
        phases.append(("sse_more", sse, STREAM_MORE % args.more_events))
    for kind, variants, body in phases:
        for v in variants:  # warm-up: pools, caches, page faults
            measure(v, body, 1, args.connections, load, lane_procs)
        for order in rotations(variants, args.reps):
            for v in order:
                sample = measure(v, body, args.seconds, args.connections, load, lane_procs)
                results[kind].setdefault(v.name, []).append(sample)
    return {"results": results, "variants": {v.name: v for v in plain}}


def run_goodput(args: argparse.Namespace, tmp: Path, children: list[Child]) -> dict[str, Any]:
    """2xx/s through nginx and through the endpoint in front of GPU-bound lanes.

    The load is ``endpoint_overload.py``'s open-loop generator (a closed loop such as wrk
    answers every 429 with an immediate new request, which no client honouring
    ``Retry-After`` does): ``--goodput-levels`` multiples of the lanes' capacity.
    """
    proxy, _both, load = core_layout()
    lanes = []
    for i in range(args.gpu_lanes):
        argv = [sys.executable, "-m", "ddsup", "fake-vllm", "--port", "0", "--model", "m"]
        argv += ["--max-num-seqs", str(args.max_num_seqs), "--ttft", str(args.ttft)]
        argv += ["--tokens-per-second", "0", "--lane-id", f"gpu{i}"]
        children.append(start(argv, load))
        lanes.append(first_line_url(children[-1]))
    lane_procs = [psutil.Process(child.pid) for child in children]
    n1, n1_url = start_nginx(ensure_nginx(), lanes, sorted(proxy), tmp / "gpu")
    e1, e1_url = endpoint(lanes, 1, proxy, "--max-queue-per-lane", str(args.max_queue_per_lane))
    children += [n1, e1]
    nginx_worker = psutil.Process(n1.pid).children()[0]  # run_level charges watched[0] only
    variants = [
        Variant("nginx 1w", n1_url, frozenset(proxy), (nginx_worker,)),
        Variant("endpoint 1w", e1_url, frozenset(proxy), (psutil.Process(e1.pid),)),
    ]
    capacity = args.gpu_lanes * args.max_num_seqs / args.ttft
    results: dict[float, dict[str, list[Any]]] = {}
    for factor in args.goodput_levels:
        for order in rotations(variants, args.goodput_reps):
            for v in order:
                host, port = v.url.removeprefix("http://").rsplit(":", 1)
                spec = {"host": host, "port": int(port), "connections": args.goodput_connections}
                spec |= {"seconds": args.goodput_seconds, "warmup": 1.0, "probe_interval": 0.05}
                spec |= {"rate": factor * capacity - 1 / 0.05, "closed": 0}
                watched = [*v.serving, *lane_procs]
                level = run_level(f"{factor:g}x {v.name}", spec, watched, load)
                results.setdefault(factor, {}).setdefault(v.name, []).append(level)
    return {"results": results, "capacity": capacity}


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def report_cpu(cpu: dict[str, Any], args: argparse.Namespace) -> dict[str, float]:
    """Print the CPU tables; return the figures the goals need."""
    results, variants = cpu["results"], cpu["variants"]
    med = {
        kind: {
            name: {
                "rps": median([s.rps for s in ss]),
                "p50": median([s.p50_ms for s in ss]),
                "p99": median([s.p99_ms for s in ss]),
                "cpu": median([s.cpu_us for s in ss]),
                "share": median([s.cpu_s / s.seconds for s in ss]),
                "load": median([s.load_us for s in ss]),
            }
            for name, ss in by_name.items()
        }
        for kind, by_name in results.items()
    }
    print(
        f"wrk -c {args.connections} -d {args.seconds:g}s × {args.reps} reps, medians; "
        "CPU = user + system of the serving processes; share = of the cores they may use; "
        "load = wrk's and the lanes' CPU"
    )
    print(f"\nplain JSON, {args.lanes} fast lanes")
    _table(med["plain"], variants)
    print(
        f"\ntemplated prompts ({len(TEMPLATED)} in turn, {len(TEMPLATED[0]):,} bytes: 64 "
        f"templates × 8 records), {args.lanes} fast lanes"
    )
    _table(med["templated"], variants)
    print(f"\nSSE, {args.events} events per request, {args.gap * 1000:g} ms apart")
    _table(med["sse"], variants)
    per_event = {}
    for name in med["sse"]:
        if name == "direct":
            continue
        per_event[name] = (med["sse"][name]["cpu"] - med["plain"][name]["cpu"]) / args.events
    for name, value in per_event.items():
        share = med["sse"][name]["share"] / len(variants[name].cores) * 100
        ratio = value / per_event["nginx 1w"]
        print(
            f"  {name:<12} CPU per event {value:6.1f} µs (x nginx 1w {ratio:.2f}; "
            f"{share:.0f} % of its cores during SSE)"
        )
    marginal = {}
    if args.more_events:
        more = args.more_events
        print(f"\nSSE, {more} events per request (the same requests asking for more)")
        _table(med["sse_more"], variants)
        for name in per_event:
            extra = med["sse_more"][name]["cpu"] - med["sse"][name]["cpu"]
            marginal[name] = extra / (more - args.events)
        for name, value in marginal.items():
            share = med["sse_more"][name]["share"] / len(variants[name].cores) * 100
            print(
                f"  {name:<12} CPU per event, marginal ({args.events} → {more} events) "
                f"{value:6.1f} µs (x nginx 1w {value / marginal['nginx 1w']:.2f}; "
                f"{share:.0f} % of its cores)"
            )
    plain = med["plain"]
    if args.baseline:
        for kind, figure in (("plain", "CPU per request"), ("sse", "CPU per SSE request")):
            for workers in ("1w", "2w"):
                now, then = (
                    med[kind][f"endpoint {workers}"],
                    med[kind][f"{args.baseline} {workers}"],
                )
                print(
                    f"  {kind:<5} {figure} endpoint {workers} {now['cpu']:.1f} µs, "
                    f"{args.baseline} {workers} {then['cpu']:.1f} µs "
                    f"(x {now['cpu'] / then['cpu']:.2f}); req/s x {now['rps'] / then['rps']:.2f}"
                )
    ceiling = _two_core_ceiling(plain, variants)
    return {
        "ceiling": ceiling.get("endpoint", float("nan")),
        "cpu": plain["endpoint 1w"]["cpu"],
        "prefix": plain["prefix 1w"]["cpu"],
        "templated": med["templated"]["endpoint 1w"]["cpu"],
        "templated_prefix": med["templated"]["prefix 1w"]["cpu"],
        "event": per_event["endpoint 1w"],
        "event_marginal": marginal.get("endpoint 1w", float("nan")),
        "scale": plain["endpoint 2w"]["rps"] / plain["endpoint 1w"]["rps"],
        "nginx_scale": plain["nginx 2w"]["rps"] / plain["nginx 1w"]["rps"],
    }


def _two_core_ceiling(
    plain: dict[str, dict[str, float]], variants: dict[str, Variant]
) -> dict[str, float]:
    """Where the load shares the 2-worker variants' cores (a machine with fewer than 4),
    the most 2 workers can give, as a multiple of 1 worker's req/s: those cores' CPU
    seconds divided by what a request costs on them (the proxy's CPU plus wrk's and the
    lanes'). Printed, and returned per proxy; empty where the load has cores of its own."""
    ceilings: dict[str, float] = {}
    for proxy in ("endpoint", "nginx"):
        two, one = plain[f"{proxy} 2w"], plain[f"{proxy} 1w"]
        cores = variants[f"{proxy} 2w"].cores | variants["direct"].cores
        if not variants[f"{proxy} 2w"].cores & variants["direct"].cores:
            continue
        most = len(cores) / ((two["cpu"] + two["load"]) * 1e-6)
        ceilings[proxy] = most / one["rps"]
        print(
            f"  {proxy} 2w on cores shared with the load: at most {most:,.0f} req/s "
            f"({len(cores)} cores / ({two['cpu']:.1f} µs proxy + {two['load']:.1f} µs "
            f"wrk and lanes per request)) = {ceilings[proxy]:.2f}× its 1 worker"
        )
    return ceilings


def report_goodput(goodput: dict[str, Any], args: argparse.Namespace) -> float:
    """Print goodput through nginx and the endpoint; return the worst ratio."""
    print(
        f"\ngoodput (2xx/s) in front of {args.gpu_lanes} GPU-bound lanes "
        f"(fake-vllm × {args.max_num_seqs} slots, ttft {args.ttft:g} s: "
        f"{goodput['capacity']:.0f} req/s capacity); open loop, {args.goodput_seconds:g} s "
        f"per run; endpoint --max-queue-per-lane {args.max_queue_per_lane}"
    )
    print(
        f"  {'offered':>8} {'variant':<12}{'2xx/s':>8}{'429 %':>7}{'2xx p50':>9}{'2xx p99':>9}"
        f"{'proxy CPU':>10}{'errors':>8}"
    )
    ratios = []
    for factor, by_name in goodput["results"].items():
        good = {}
        for name, levels in by_name.items():
            good[name] = median([lv.goodput for lv in levels])
            errors = sum(sum(lv.errors.values()) for lv in levels)
            print(
                f"  {median([lv.offered for lv in levels]):>8.0f} {name:<12}{good[name]:>8.1f}"
                f"{100 * median([lv.busy_share for lv in levels]):>6.0f}%"
                f"{median([lv.ok_p50 for lv in levels]):>8.0f}ms"
                f"{median([lv.ok_p99 for lv in levels]):>8.0f}ms"
                f"{median([lv.endpoint_cpu for lv in levels]):>9.0f}%{errors:>8}"
            )
        ratio = good["endpoint 1w"] / good["nginx 1w"]
        ratios.append(ratio)
        print(f"  {factor:g}× capacity: endpoint / nginx goodput {ratio:.3f}")
    return min(ratios)


def report(
    cpu: dict[str, Any] | None, goodput: dict[str, Any] | None, args: argparse.Namespace
) -> None:
    print(f"load average {os.getloadavg()[0]:.2f} at the end of the run\n")
    figures = report_cpu(cpu, args) if cpu is not None else None
    worst = report_goodput(goodput, args) if goodput is not None else None
    print("\ngoals")
    if figures is not None:
        _goal("CPU per plain proxied request ≤ 80 µs (endpoint 1w)", figures["cpu"], 80, "µs")
        _goal("  … routing by prefix (prefix 1w)", figures["prefix"], 80, "µs")
        _goal("  … a templated prompt, routing by prefix", figures["templated_prefix"], 80, "µs")
        print(
            f"    (least-load, the same prompt: {figures['templated']:.1f} µs; "
            f"prefix / least-load {figures['templated_prefix'] / figures['templated']:.2f}×)"
        )
        _goal("CPU per SSE event ≤ 25 µs (endpoint 1w)", figures["event"], 25, "µs")
        if args.more_events:
            marginal = figures["event_marginal"]
            _goal("  … the marginal cost of an event (endpoint 1w)", marginal, 25, "µs")
        scale = figures["scale"]
        print(
            f"  2 workers on 2 cores ≥ 1.8× the req/s of 1 worker: {scale:.2f}× "
            f"({'met' if scale >= 1.8 else 'missed'}; nginx 2w/1w {figures['nginx_scale']:.2f}×)"
        )
        if figures["ceiling"] == figures["ceiling"]:  # not NaN: the load shares the cores
            print(
                f"    … the most these cores allow with the load on them: "
                f"{figures['ceiling']:.2f}× (the goal needs cores the load does not use)"
            )
    if worst is not None:
        verdict = "met" if worst >= 0.95 else "missed"
        print(f"  goodput ≥ 0.95 of nginx's: {worst:.3f} at worst ({verdict})")


def _goal(what: str, value: float, limit: float, unit: str) -> None:
    print(f"  {what}: {value:.1f} {unit} ({'met' if value <= limit else 'missed'})")


def _table(med: dict[str, dict[str, float]], variants: dict[str, Variant]) -> None:
    nginx = med.get("nginx 1w")
    print(
        f"  {'variant':<16}{'cores':>6}{'req/s':>9}{'p50 ms':>8}{'p99 ms':>8}"
        f"{'CPU µs/req':>11}{'x nginx':>8}{'share':>7}{'load µs/req':>12}"
    )
    for name, m in med.items():
        cores = variants[name].cores
        ratio = m["cpu"] / nginx["cpu"] if nginx else float("nan")
        share = m["share"] / len(cores) * 100
        print(
            f"  {name:<16}{','.join(map(str, sorted(cores))):>6}{m['rps']:>9.0f}"
            f"{m['p50']:>8.2f}{m['p99']:>8.2f}{m['cpu']:>11.1f}{ratio:>8.2f}{share:>6.0f}%"
            f"{m['load']:>12.1f}"
        )


# Prefix-aware routing beside least-load (--only prefix, --only prefix-scale)

POLICIES = ("least-load", "prefix")
_WORDS = (
    "label review product customer answer positive negative neutral example careful "
    "reason brief quality shipping price broken works great awful return refund color "
    "size battery screen sound delivery package support quickly slowly never always"
)
WORDS = _WORDS.split()


@dataclass
class Turn:
    """One variant's run of the workload."""

    policy: str
    requests: int = 0
    errors: int = 0
    seconds: float = 0.0
    queries: float = 0.0
    hits: float = 0.0
    outstanding: list[list[int]] = field(default_factory=list)  # per sample, per lane
    idle_while_queued: int = 0
    # the idle samples by cause: no request left to send (the turn's tail), the endpoint
    # had sent the idle lane nothing (the choice), or it had, and vLLM did not run it yet
    idle_tail: int = 0
    idle_unsent: int = 0
    idle_sent: int = 0
    idle_seen: list[str] = field(default_factory=list)  # per idle sample: what each lane had
    samples: int = 0
    choices: dict[str, float] = field(default_factory=dict)  # prefix routing's, by kind

    @property
    def computed(self) -> float:
        return self.queries - self.hits


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def get(url: str, path: str, timeout: float = 5.0) -> tuple[int, bytes]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def post(url: str, path: str, body: bytes = b"", timeout: float = 30.0) -> tuple[int, bytes]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request("POST", path, body, {"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def metric(text: bytes, name: str, label: str = "") -> float:
    """The sum of ``name``'s samples in Prometheus ``text`` (those whose labels hold
    ``label``)."""
    total = 0.0
    for match in re.finditer(rf"^{re.escape(name)}(\{{[^}}]*\}})? (\S+)$", text.decode(), re.M):
        if label in (match.group(1) or ""):
            total += float(match.group(2))
    return total


def wait_ready(url: str, proc: Any, limit: float) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{url}: exited with {proc.returncode} before it was ready")
        try:
            if get(url, "/health", 2.0)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)  # another process's readiness: a bounded poll
    raise SystemExit(f"{url}: not ready within {limit:g} s")


@contextmanager
def routing_endpoint(
    stack: ExitStack, lanes: list[str], policy: str, tmp: Path, flags: Sequence[str] = ()
) -> Iterator[tuple[str, psutil.Process]]:
    """An endpoint routing by ``policy`` (a variant's name: by prefix, with its ``flags``)."""
    routing = policy if policy in POLICIES else "prefix"
    argv = [sys.executable, "-m", "ddsup", "endpoint", "--port", "0", "--routing", routing]
    argv += flags
    argv += [a for lane in lanes for a in ("--lane", f"m={lane}")]
    out = tmp / f"endpoint-{policy}.log"
    proc = stack.enter_context(marked_process(argv, out, stop_timeout=10))
    deadline = time.monotonic() + 30
    while not (match := re.search(r"http://\S+", out.read_text(errors="replace"))):
        if time.monotonic() > deadline or proc.poll() is not None:
            raise SystemExit(f"the {policy} endpoint did not start:\n{out.read_text()}")
        time.sleep(0.05)  # its first line: a bounded poll
    yield match.group(0), psutil.Process(proc.pid)


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def template_of(rng: random.Random, lane: str, tokens: int) -> str:
    """A new shared prefix of about ``tokens`` tokens (the lane's tokenizer counts)."""
    text = f"Task {rng.randrange(10**9)}: " + words(rng, 8)
    while True:
        body = json.dumps({"model": "m", "prompt": text}).encode()
        status, answer = post(lane, "/tokenize", body)
        if status != 200:
            raise SystemExit(f"/tokenize answered {status}: {answer[:200]!r}")
        if json.loads(answer)["count"] >= tokens:
            return text
        text += " " + words(rng, 4)


def workload(rng: random.Random, lane: str, args: argparse.Namespace) -> list[bytes]:
    templates = [template_of(rng, lane, args.prefix_tokens) for _ in range(args.templates)]
    bodies = []
    for template in templates:
        for i in range(args.records):
            record = f"{template}\nRecord {i}: {words(rng, args.record_words)}\nAnswer:"
            bodies.append(json.dumps({"model": "m", "prompt": record, "max_tokens": 8}).encode())
    rng.shuffle(bodies)
    return bodies


def drive(
    url: str,
    bodies: list[bytes],
    concurrency: int,
    turn: Turn,
    drained: threading.Event | None = None,
) -> None:
    """Send ``bodies`` through ``url``, ``concurrency`` at a time, each client on its own
    keep-alive connection; ``drained`` is set once every body is sent."""
    work: queue.SimpleQueue[bytes] = queue.SimpleQueue()
    for body in bodies:
        work.put(body)
    host, port = url.removeprefix("http://").rsplit(":", 1)
    lock = threading.Lock()

    def client() -> None:
        conn = http.client.HTTPConnection(host, int(port), timeout=120)
        while True:
            try:
                body = work.get_nowait()
            except queue.Empty:
                if drained is not None:
                    drained.set()
                break
            conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
            response = conn.getresponse()
            response.read()
            with lock:
                turn.requests += 1
                turn.errors += response.status != 200
        conn.close()

    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    start = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    turn.seconds = time.monotonic() - start


def watch(
    url: str, lanes: list[str], turn: Turn, done: threading.Event, drained: threading.Event
) -> None:
    """Every 0.2 s: each lane's requests in flight through the endpoint, and whether a
    lane sat idle while requests queued: in another lane (by vLLM's own gauges), or in
    the endpoint, waiting for a free slot (``--max-in-flight-per-lane``); and why."""
    while not done.wait(0.2):
        tail = drained.is_set()
        try:
            text = get(url, "/metrics")[1]
            gauges = [get(lane, "/metrics")[1] for lane in lanes]
        except OSError:
            continue
        sent = [
            int(metric(text, "ddsup_endpoint_lane_outstanding", f'm#{i}"'))
            for i in range(len(lanes))
        ]
        turn.outstanding.append(sent)
        running = [metric(g, "vllm:num_requests_running") for g in gauges]
        waiting = [metric(g, "vllm:num_requests_waiting") for g in gauges]
        idle = [r == 0 and w == 0 for r, w in zip(running, waiting, strict=True)]
        held = metric(text, "ddsup_endpoint_waiting_requests")
        turn.samples += 1
        if any(idle) and (held > 0 or any(w > 0 for w in waiting)):
            turn.idle_while_queued += 1
            turn.idle_seen.append(
                "/".join(
                    f"{n}:{r:.0f}+{w:.0f}" for n, r, w in zip(sent, running, waiting, strict=True)
                )
                + (f" endpoint:{held:.0f}" if held else "")
                + ("" if not tail else " tail")
            )
            if tail:
                turn.idle_tail += 1
            elif any(i and n == 0 for i, n in zip(idle, sent, strict=True)):
                turn.idle_unsent += 1
            else:
                turn.idle_sent += 1


def cache_counters(lanes: list[str]) -> tuple[float, float]:
    texts = [get(lane, "/metrics")[1] for lane in lanes]
    return (
        sum(metric(t, "vllm:prefix_cache_queries_total") for t in texts),
        sum(metric(t, "vllm:prefix_cache_hits_total") for t in texts),
    )


def run_vllm(args: argparse.Namespace, tmp: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from support.vllm import VllmInstall, installed_vllm  # tests/support, as pytest has it

    found = installed_vllm()
    if isinstance(found, str):
        raise SystemExit(found)
    install: VllmInstall = found
    env = {**install.environment(), "VLLM_SERVER_DEV_MODE": "1"}
    extra = ["--served-model-name", "m", "--max-num-seqs", str(args.max_num_seqs)]
    if args.kv_blocks:
        extra += ["--num-gpu-blocks-override", str(args.kv_blocks)]
    if args.block_size:
        extra += ["--block-size", str(args.block_size)]
    with ExitStack() as stack:
        lanes = []
        procs = []
        for i in range(2):
            port = free_port()
            argv = install.serve_argv(port, *extra)
            out = tmp / f"lane{i}.log"
            procs.append(stack.enter_context(marked_process(argv, out, stop_timeout=30, env=env)))
            lanes.append(f"http://127.0.0.1:{port}")
        for lane, proc in zip(lanes, procs, strict=True):
            wait_ready(lane, proc, args.ready_timeout)
        print(f"2 vLLM lanes ready ({install.model.name}, {' '.join(extra)})", flush=True)
        variants: dict[str, list[str]] = {p: [] for p in POLICIES}
        variants.update(args.variant)
        urls = {
            p: stack.enter_context(routing_endpoint(stack, lanes, p, tmp, flags))[0]
            for p, flags in variants.items()
        }
        rng = random.Random(args.seed)
        turns: list[Turn] = []
        for rep in range(args.reps):
            order = list(variants) if rep % 2 == 0 else list(variants)[::-1]
            for policy in order:
                turns.append(one_turn(urls[policy], lanes, policy, rng, args))
                print(describe(turns[-1], len(lanes)), flush=True)
        stop_trees([psutil.Process(proc.pid) for proc in procs], 30)
    summarise(turns, args)


def stop_trees(roots: list[psutil.Process], timeout: float) -> None:
    """SIGTERM each of ``roots`` and wait for them and their descendants (vLLM's engine
    processes end after their API server), so that none is swept as a leftover."""
    everyone = list(roots)
    for root in roots:
        with suppress(psutil.Error):
            everyone += root.children(recursive=True)
            root.terminate()
    psutil.wait_procs(everyone, timeout=timeout)


def one_turn(
    url: str, lanes: list[str], policy: str, rng: random.Random, args: argparse.Namespace
) -> Turn:
    for lane in lanes:
        status, answer = post(lane, "/reset_prefix_cache")
        if status != 200:
            raise SystemExit(f"{lane}/reset_prefix_cache answered {status}: {answer[:200]!r}")
    bodies = workload(rng, lanes[0], args)
    turn = Turn(policy)
    before = cache_counters(lanes)
    routed = choices(url)
    done, drained = threading.Event(), threading.Event()
    watcher = threading.Thread(target=watch, args=(url, lanes, turn, done, drained))
    watcher.start()
    try:
        drive(url, bodies, args.concurrency, turn, drained)
    finally:
        done.set()
        watcher.join()
    time.sleep(1.5)  # vLLM publishes its counters about once a second
    after = cache_counters(lanes)
    turn.queries, turn.hits = after[0] - before[0], after[1] - before[1]
    turn.choices = {k: v - routed.get(k, 0.0) for k, v in choices(url).items()}
    return turn


def choices(url: str) -> dict[str, float]:
    """The endpoint's ``prefix_routed_total`` by choice."""
    text = get(url, "/metrics")[1].decode()
    found = re.findall(
        r'^ddsup_endpoint_prefix_routed_total\{.*choice="(\w+)"\} (\S+)$', text, re.M
    )
    return {how: float(n) for how, n in found}


def describe(turn: Turn, lanes: int) -> str:
    mean = [
        statistics.fmean(s[i] for s in turn.outstanding) if turn.outstanding else 0.0
        for i in range(lanes)
    ]
    gaps = [max(s) - min(s) for s in turn.outstanding] or [0]
    rate = turn.hits / turn.queries if turn.queries else 0.0
    idle = turn.idle_while_queued / turn.samples if turn.samples else 0.0
    return (
        f"  {turn.policy:<10} {turn.requests} requests ({turn.errors} errors) in {turn.seconds:.1f} s: "
        f"{turn.requests / turn.seconds:.1f} req/s; prefill computed {turn.computed:,.0f} tokens "
        f"of {turn.queries:,.0f} (hit rate {rate:.1%}); in flight per lane "
        f"{', '.join(f'{m:.1f}' for m in mean)} (gap mean {statistics.fmean(gaps):.1f}, "
        f"max {max(gaps)}); a lane idle while requests queued in "
        f"{idle:.0%} of {turn.samples} samples (after the last send {turn.idle_tail}, "
        f"none sent to it {turn.idle_unsent}, sent but not in its gauges {turn.idle_sent})"
        + (
            f"; routed {', '.join(f'{k} {v:.0f}' for k, v in sorted(turn.choices.items()))}"
            if turn.choices
            else ""
        )
        + (
            "\n    idle samples (per lane: in flight through the endpoint: running+waiting "
            f"in vLLM): {', '.join(turn.idle_seen)}"
            if turn.idle_seen
            else ""
        )
    )


def summarise(turns: list[Turn], args: argparse.Namespace) -> None:
    def med(policy: str, what: str) -> float:
        values = [
            getattr(t, what) if what != "rps" else t.requests / t.seconds
            for t in turns
            if t.policy == policy
        ]
        return statistics.median(values)

    print(
        f"\nmedians of {args.reps} turns each, {args.templates} templates × {args.records} records, "
        f"{args.concurrency} in flight, load average {os.getloadavg()[0]:.1f}:"
    )
    names = [*POLICIES, *(name for name, _ in args.variant)]
    for policy in names:
        print(
            f"  {policy:<10} prefill computed {med(policy, 'computed'):,.0f} tokens, "
            f"{med(policy, 'rps'):.1f} req/s, idle while requests queued in "
            f"{med(policy, 'idle_while_queued'):.0f} samples"
        )
    for policy in names[1:]:
        ratio = med(policy, "computed") / med("least-load", "computed")
        verdict = "met" if ratio <= 0.6 else "missed"
        print(f"  prefill computed, {policy} / least-load: {ratio:.2f} (goal ≤ 0.6: {verdict})")


def fake_lanes(stack: ExitStack, count: int, tmp: Path) -> list[str]:
    """``count`` fake-vllm lanes that answer at once (their URLs)."""
    outs = []
    for i in range(count):
        argv = [sys.executable, "-m", "ddsup", "fake-vllm", "--port", "0", "--model", "m"]
        argv += ["--tokens-per-second", "0", "--max-num-seqs", "1024", "--lane-id", f"f{i}"]
        outs.append(tmp / f"fake{i}.log")
        stack.enter_context(marked_process(argv, outs[-1], stop_timeout=10))
    urls = []
    deadline = time.monotonic() + 120
    for out in outs:
        while not (match := re.search(r"http://\S+", out.read_text(errors="replace"))):
            if time.monotonic() > deadline:
                raise SystemExit(f"a fake-vllm lane did not start: {out.read_text()[-500:]}")
            time.sleep(0.1)  # its first line: a bounded poll
        urls.append(match.group(0))
    return urls


def synthetic(rng: random.Random, templates: int, records: int) -> list[bytes]:
    """Templated requests without a tokenizer: prefixes of about 1,500 characters."""
    bodies = []
    for t in range(templates):
        template = f"Task {rng.randrange(10**9)} {t}: " + words(rng, 220)
        for i in range(records):
            prompt = f"{template}\nRecord {i}: {words(rng, 12)}\nAnswer:"
            bodies.append(json.dumps({"model": "m", "prompt": prompt, "max_tokens": 8}).encode())
    rng.shuffle(bodies)
    return bodies


def run_scale(args: argparse.Namespace, tmp: Path) -> None:
    """The endpoint's CPU per request and memory in front of ``--lanes`` lanes, by policy."""
    with ExitStack() as stack:
        lanes = fake_lanes(stack, args.lanes, tmp)
        variants: dict[str, list[str]] = {p: [] for p in POLICIES}
        variants.update(args.variant)
        endpoints = {
            p: stack.enter_context(routing_endpoint(stack, lanes, p, tmp, flags))
            for p, flags in variants.items()
        }
        print(f"{len(lanes)} fake-vllm lanes ready", flush=True)
        rng = random.Random(args.seed)
        cpu: dict[str, list[float]] = {p: [] for p in variants}
        for rep in range(args.reps):
            for policy in list(variants) if rep % 2 == 0 else list(variants)[::-1]:
                url, proc = endpoints[policy]
                bodies = synthetic(rng, 64, args.records * 8)
                times = proc.cpu_times()
                turn = Turn(policy)
                drive(url, bodies, args.concurrency, turn)
                spent = sum(proc.cpu_times()[:2]) - sum(times[:2])
                cpu[policy].append(spent / turn.requests * 1e6)
                print(
                    f"  {policy:<10} {turn.requests} requests ({turn.errors} errors), "
                    f"{turn.requests / turn.seconds:.0f} req/s: endpoint CPU "
                    f"{cpu[policy][-1]:.1f} µs per request, RSS "
                    f"{proc.memory_info().rss / 2**20:.0f} MiB",
                    flush=True,
                )
    print(f"\nmedians, {args.lanes} lanes, load average {os.getloadavg()[0]:.1f}:")
    for policy in cpu:
        print(f"  {policy:<10} endpoint CPU {statistics.median(cpu[policy]):.1f} µs per request")


def index_cost(lanes: int) -> None:
    """The keys and the choice alone, in this process, with the index at its bound."""
    table = LaneTable(LaneInfo(f"l{i}", "m", f"http://127.0.0.1:{9000 + i}") for i in range(lanes))
    router = PrefixRouter(
        table, PrefixPolicy(), PrefixIndex(1 << 18, 600.0), limit=128, stale_after=3.0
    )
    states = table.states()
    payloads = [json.loads(body) for body in synthetic(random.Random(2), 64, 400)]
    for n, payload in enumerate(payloads):  # fill the index past its bound
        keys = prompt_keys(payload, "m")
        router.choose("m", states[n % lanes], keys, (), n * 1e-3)
    start = time.perf_counter()
    for payload in payloads:
        prompt_keys(payload, "m")
    keyed = time.perf_counter() - start
    start = time.perf_counter()
    for n, payload in enumerate(payloads):
        keys = prompt_keys(payload, "m")
        router.choose("m", states[n % lanes], keys, (), 30 + n * 1e-3)
    chosen = time.perf_counter() - start - keyed
    print(
        f"\nthe index alone ({lanes} lanes, {len(payloads)} requests of about 1,600 characters, "
        f"{len(router.index):,} blocks held): keys {keyed / len(payloads) * 1e6:.1f} µs, "
        f"choice and record {chosen / len(payloads) * 1e6:.1f} µs per request"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5, help="wrk time per CPU run")
    parser.add_argument("--reps", type=int, default=3, help="repetitions (medians reported)")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument(
        "--lanes", type=int, help="fast lanes behind the proxies (2; prefix-scale: 64)"
    )
    parser.add_argument("--events", type=int, default=20, help="SSE events per request")
    parser.add_argument("--gap", type=float, default=0.002, help="seconds between SSE events")
    parser.add_argument(
        "--more-events",
        type=int,
        default=0,
        metavar="N",
        help="also SSE requests asking for N events: the marginal CPU per event "
        "(the slope between the two counts, free of any per-request cost of SSE)",
    )
    parser.add_argument("--gpu-lanes", type=int, default=2)
    parser.add_argument(
        "--max-num-seqs", type=int, help="a GPU lane's batch (32; prefix: a vLLM lane's, 4)"
    )
    parser.add_argument("--ttft", type=float, default=0.5)
    parser.add_argument("--max-queue-per-lane", type=int, default=64)
    parser.add_argument("--goodput-seconds", type=float, default=20)
    parser.add_argument("--goodput-reps", type=int, default=2)
    parser.add_argument("--goodput-connections", type=int, default=512)
    parser.add_argument(
        "--goodput-levels",
        type=lambda text: [float(x) for x in text.split(",")],
        default=[1.0, 4.0],
        help="offered load in multiples of the lanes' capacity",
    )
    parser.add_argument(
        "--only", choices=("cpu", "goodput", "prefix", "prefix-scale"), help="one part only"
    )
    prefix = parser.add_argument_group("prefix routing (--only prefix, --only prefix-scale)")
    prefix.add_argument("--templates", type=int, default=8)
    prefix.add_argument("--records", type=int, default=40, help="records per template")
    prefix.add_argument("--prefix-tokens", type=int, default=300)
    prefix.add_argument("--record-words", type=int, default=12)
    prefix.add_argument("--concurrency", type=int, default=16)
    prefix.add_argument("--kv-blocks", type=int, default=0, help="a lane's KV cache (0: vLLM's)")
    prefix.add_argument(
        "--block-size", type=int, default=0, help="tokens per KV block (0: vLLM's; 128 on CPU)"
    )
    prefix.add_argument("--seed", type=int, default=1)
    prefix.add_argument(
        "--variant",
        type=_variant,
        action="append",
        default=[],
        metavar="NAME=FLAGS",
        help="also an endpoint routing by prefix with these ddsup endpoint flags, e.g. "
        '"k4=--prefix-balance-requests 4 --prefix-balance-ratio 1"; repeatable',
    )
    prefix.add_argument("--logs", type=Path, help="keep the lanes' and endpoints' logs here")
    prefix.add_argument("--ready-timeout", type=float, default=300)
    parser.add_argument(
        "--baseline", metavar="REV", help="also run the endpoint of this git revision (CPU part)"
    )
    args = parser.parse_args()
    if args.more_events and args.more_events <= args.events:
        parser.error("--more-events must be more than --events (the slope is between them)")
    if args.only in ("prefix", "prefix-scale"):
        run_prefix(args)
        return
    args.lanes = args.lanes or 2
    args.max_num_seqs = args.max_num_seqs or 32
    if not shutil.which("wrk"):
        raise SystemExit("wrk is needed: apt-get install -y wrk")
    tmp = Path(tempfile.mkdtemp(prefix="ddsup-compare-"))
    (tmp / "gpu").mkdir()
    children: list[Child] = []
    try:
        cpu = run_cpu(args, tmp, children) if args.only != "goodput" else None
        stop_all(children)
        children.clear()
        good = run_goodput(args, tmp, children) if args.only != "cpu" else None
    finally:
        stop_all(children)
        shutil.rmtree(tmp, ignore_errors=True)
    report(cpu, good, args)


def _variant(text: str) -> tuple[str, list[str]]:
    name, sep, flags = text.partition("=")
    if not sep or not name or name in POLICIES:
        raise argparse.ArgumentTypeError(f"{text!r}: write NAME=FLAGS (NAME not a policy's)")
    return name, shlex.split(flags)


def run_prefix(args: argparse.Namespace) -> None:
    args.max_num_seqs = args.max_num_seqs or 4
    args.lanes = args.lanes or 64
    with tempfile.TemporaryDirectory(prefix="ddsup-prefix-") as tmp:
        logs = args.logs or Path(tmp)
        logs.mkdir(parents=True, exist_ok=True)
        if args.only == "prefix":
            run_vllm(args, logs)
        else:
            run_scale(args, logs)
            index_cost(args.lanes)


if __name__ == "__main__":
    main()
