"""Measure ``ddsup report`` on a large synthetic run: render time and file size.

Writes a synthetic state directory shaped like a real run (``run.json``, ``plan.json``,
``events.jsonl``, the endpoint's series at one line a second, ``result.json``): ``--lanes``
one-GPU lanes on nodes of 8 GPUs, staggered starts, loads of 2–5 minutes, a tenth of
the lanes crashing once and loading again, a ramp of traffic with dips and bursts of
429s, and a stop at the end. Then it times the report: in-process (load + build +
render, the median of ``--reps``) and end to end (``ddsup report`` as a command), and
prints the sizes.

    python bench/report_scale.py [--lanes 128] [--hours 1] [--reps 3] [--keep DIR]

The generator is shared with ``tests/report`` (a 1,024-lane page must read well too).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ddsup.ops.report import Rows, build_report, render_report
from ddsup.record import load_run
from ddsup.record._series import header_line

T0 = 1_800_000_000.0  # a fixed start: the same arguments give the same files
GPUS_PER_NODE = 8


def write_synthetic_run(
    path: Path, *, lanes: int = 128, seconds: float = 3600.0, seed: int = 1
) -> None:
    """A finished run of ``lanes`` lanes lasting ``seconds``, written into ``path``."""
    rng = random.Random(seed)
    path.mkdir(parents=True, exist_ok=True)
    nodes = [f"gpu{n:03d}" for n in range((lanes + GPUS_PER_NODE - 1) // GPUS_PER_NODE)]
    instances = [_lane(i, nodes) for i in range(lanes)]
    instances.append(_client("endpoint", nodes[0], 9000))
    instances.append(_client("worker", nodes[0], None))
    plan = {
        "format": 1,
        "client": nodes[0],
        "endpoint_url": "http://127.0.0.1:9000",
        "shared_address": False,
        "nodes": [
            {"name": n, "address": f"10.0.{i // 256}.{i % 256}", "gpus": list(range(GPUS_PER_NODE))}
            for i, n in enumerate(nodes)
        ],
        "instances": instances,
    }
    events: list[dict[str, Any]] = [_run(T0, "starting", invocation_id="synthetic")]
    ready_at: dict[str, list[tuple[float, float]]] = {}
    stop = T0 + seconds - 40.0
    for item in instances[:lanes]:
        ready_at[item["instance"]] = _lane_events(item, rng, stop, events)
    last_ready = max(start for spans in ready_at.values() for start, _ in spans[:1])
    endpoint_ready = min(last_ready, T0 + seconds / 4) + 1.0
    events += _client_events("endpoint", nodes[0], endpoint_ready - 0.5, endpoint_ready, stop + 1)
    events += _client_events("worker", nodes[0], endpoint_ready, endpoint_ready + 0.01, stop - 5)
    cause = {"unit": "worker", "reason": "exit status 0", "exit": {"code": 0}}
    events.append(_run(stop - 5, "ending", status="ok", exit_code=0, cause=cause))
    events.append(_run(stop, "stopping"))
    events.append(_run(T0 + seconds, "finished", status="ok", exit_code=0, cause=cause))
    events.sort(key=lambda e: e["time"])
    _write(path / "plan.json", json.dumps(plan, indent=2))
    _write(path / "events.jsonl", "".join(json.dumps(e) + "\n" for e in events))
    _write(path / "result.json", json.dumps({"status": "ok", "exit_code": 0, "cause": cause}))
    run = {"invocation_id": "synthetic", "launcher": "slurm", "pid": 1, "started_at": T0}
    _write(path / "run.json", json.dumps({**run, "unit_dir": str(path / "units")}))
    series = path / "series"
    series.mkdir(exist_ok=True)
    _write(series / "endpoint-1.jsonl", _series(ready_at, endpoint_ready, stop - 5, rng))


def _write(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")


def _lane(i: int, nodes: list[str]) -> dict[str, Any]:
    return {
        "instance": f"llama@{i}",
        "unit": "llama@",
        "type": "lane",
        "node": nodes[i // GPUS_PER_NODE],
        "gpus": [i % GPUS_PER_NODE],
        "port": 8000 + i % GPUS_PER_NODE,
        "replica": i,
        "rank": 0,
    }


def _client(name: str, node: str, port: int | None) -> dict[str, Any]:
    return {"instance": name, "unit": name, "type": name, "node": node, "gpus": [], "port": port}


def _run(t: float, reason: str, **extra: Any) -> dict[str, Any]:
    return {"time": round(t, 6), "event": "run", "reason": reason, **extra}


def _unit(
    t: float, item: dict[str, Any], old: str, new: str, reason: str, **extra: Any
) -> dict[str, Any]:
    return {
        "time": round(t, 6),
        "event": "unit",
        "instance": item["instance"],
        "node": item["node"],
        "from": old,
        "to": new,
        "reason": reason,
        **extra,
    }


def _lane_events(
    item: dict[str, Any], rng: random.Random, stop: float, events: list[dict[str, Any]]
) -> list[tuple[float, float]]:
    """Events of one lane; its ready spans."""
    slot = item["gpus"][0]
    t = T0 + 2.0
    if slot:
        events.append(_unit(t, item, "inactive", "waiting", f"stagger {slot * 5}s"))
        t += slot * 5.0
    events.append(_unit(t, item, "waiting" if slot else "inactive", "starting", "starting"))
    spans = []
    ready = t + rng.uniform(120, 300)
    events.append(_unit(ready, item, "starting", "ready", "probe passed"))
    if rng.random() < 0.1 and stop - ready > 900:  # crashes once, loads again
        crash = rng.uniform(ready + 60, stop - 600)
        spans.append((ready, crash))
        events.append(
            {
                "time": crash,
                "event": "exit",
                "instance": item["instance"],
                "node": item["node"],
                "pid": 4242,
                "exit": {"code": 1},
                "reason": "exit status 1",
            }
        )
        events.append(
            _unit(
                crash + 0.05,
                item,
                "ready",
                "restarting",
                "exit status 1; restart in 2s",
                restarts=1,
                exit={"code": 1},
            )
        )
        events.append(_unit(crash + 2.05, item, "restarting", "starting", "starting", restarts=1))
        ready = crash + 2.05 + rng.uniform(120, 300)
        events.append(_unit(ready, item, "starting", "ready", "probe passed", restarts=1))
    spans.append((ready, stop))
    events.append(_unit(stop, item, "ready", "stopping", "stop requested"))
    events.append(
        _unit(stop + rng.uniform(1, 8), item, "stopping", "exited", "stopped", exit={"code": 0})
    )
    return spans


def _client_events(
    name: str, node: str, start: float, ready: float, end: float
) -> list[dict[str, Any]]:
    item = {"instance": name, "node": node}
    return [
        _unit(start, item, "inactive", "starting", "starting"),
        _unit(
            ready, item, "starting", "ready", "probe passed" if name == "endpoint" else "started"
        ),
        _unit(end, item, "ready", "exited", "exit status 0", exit={"code": 0}),
    ]


def _series(
    ready: dict[str, list[tuple[float, float]]], begin: float, end: float, rng: random.Random
) -> str:
    """One line a second from ``begin`` to ``end``: ramp, dips, busy ready lanes, 429 bursts."""
    lines = [header_line(1, 1.0, begin)]
    second = float(int(begin))
    first_written = False
    while second < end:
        second += 1.0
        phase = (second - begin) / max(end - begin, 1.0)
        load = min(1.0, phase * 6) * (0.55 if 0.45 < phase < 0.5 else 1.0)
        lanes: list[str] = []
        counts: list[float] = []
        for name, spans in ready.items():
            if not any(a <= second - 1 and second <= b for a, b in spans):
                continue
            busy = min(1.0, max(0.0, load * rng.uniform(0.85, 1.05)))
            if busy <= 0:
                continue
            n = int(busy * rng.uniform(8, 14))
            lanes.append(name)
            counts += [n, n, int(rng.random() < 0.002), int(busy * 12), round(busy, 3), n * 2100]
        line: dict[str, Any] = {"t": second, "d": 1.0, "lanes": lanes, "counts": counts}
        if 0.7 < phase < 0.72:
            line["refused"] = {"llama": {"429": rng.randint(20, 60)}}
        if lanes and not first_written:
            line["first"] = second - 0.5
            first_written = True
        lines.append(json.dumps(line, separators=(",", ":")) + "\n")
    return "".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lanes", type=int, default=128)
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="write the run and report here and keep them")
    args = parser.parse_args()
    base = args.keep or Path(tempfile.mkdtemp(prefix="ddsup-report-bench-"))
    state = base / "run"
    try:
        made = time.perf_counter()
        write_synthetic_run(state, lanes=args.lanes, seconds=args.hours * 3600)
        made = time.perf_counter() - made
        series = sum(p.stat().st_size for p in (state / "series").iterdir())
        events = (state / "events.jsonl").stat().st_size
        print(
            f"synthetic run: {args.lanes} lanes, {args.hours:g} h; events.jsonl {events / 1e6:.2f} MB, "
            f"series {series / 1e6:.1f} MB (one line a second), written in {made:.1f} s"
        )
        timings, cpu = [], []
        for _ in range(args.reps):
            began, began_cpu = time.perf_counter(), time.process_time()
            files = load_run(state)
            page = render_report(build_report(files, time.time(), Rows.AUTO))
            timings.append(time.perf_counter() - began)
            cpu.append(time.process_time() - began_cpu)
        print(
            f"in-process load + build + render: median {statistics.median(timings):.2f} s wall, "
            f"{statistics.median(cpu):.2f} s CPU (wall of each run: "
            f"{', '.join(f'{t:.2f}' for t in timings)}); page {len(page.encode()) / 1e6:.2f} MB"
        )
        out = base / "report.html"
        began, children = time.perf_counter(), os.times()
        argv = [sys.executable, "-m", "ddsup", "report", "--state-dir", str(state), "-o", str(out)]
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        took, after = time.perf_counter() - began, os.times()
        took_cpu = after.children_user + after.children_system
        took_cpu -= children.children_user + children.children_system
        if done.returncode != 0:
            raise SystemExit(f"ddsup report failed ({done.returncode}):\n{done.stderr}")
        size = out.stat().st_size / 1e6
        print(
            f"`ddsup report` end to end (a new process, imports included): {took:.2f} s wall, "
            f"{took_cpu:.2f} s CPU; report.html {size:.2f} MB (goal: < 2 s and < 5 MB)"
        )
        print(f"load average while measuring: {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)")
        print(done.stdout.strip().splitlines()[0])
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)
        else:
            print(f"kept in {base}", file=sys.stderr)


if __name__ == "__main__":
    main()
