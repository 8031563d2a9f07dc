"""Many concurrent streams through the endpoint, clients hanging up and a lane killed mid-run.

The endpoint's stream relay (``endpoint/_stream_relay.py``) parks each streaming request
and hands it back on anything but the happy path; the tests drive each hand-back alone.
This drives them together: ``--streams`` SSE requests through ``ddsup endpoint
--workers N`` in front of three ``ddsup fake-vllm`` lanes, up to ``--concurrency`` at a
time, every third client hanging up after its third event, and one lane SIGKILLed after
``--kill-after`` requests have started. Then it checks what a user relies on:

- every stream either ended whole (200, events, ``[DONE]``), was hung up by its client,
  or was cut short because its lane died under it (the client sees the response end
  without its last chunk: a protocol error);
- the endpoint still answers, and counts nothing in flight on any lane
  (``ddsup_endpoint_lane_outstanding``);
- it logged no bug and no traceback.

Prints the outcomes and the endpoint's counters; exits 1 if a check fails. Every process
it starts carries the bench mark and is gone at the end (``bench_marks.py``).

    .venv/bin/python bench/stream_stress.py [--workers 1] [--streams 1500]
"""

from __future__ import annotations

import argparse
import os
import random
import re
import signal
import subprocess
import sys
from collections import Counter

import httpx
import trio
from bench_marks import MARK, MARK_VAR, kill_marked

Child = subprocess.Popen[str]


def start(argv: list[str]) -> tuple[Child, str]:
    """A marked ``ddsup`` process and the URL it prints first."""
    env = {**os.environ, MARK_VAR: MARK}
    proc = subprocess.Popen(
        [sys.executable, "-m", "ddsup", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        raise SystemExit(f"ddsup {' '.join(argv)} exited before printing its URL")
    return proc, line.split()[-1]


async def one_stream(client: httpx.AsyncClient, url: str, i: int, outcomes: Counter[str]) -> None:
    body = {"model": "m", "prompt": "hi", "stream": True, "max_tokens": random.randint(5, 60)}
    hang_up = i % 3 == 0
    try:
        async with client.stream("POST", f"{url}/v1/completions", json=body) as response:
            events, done = 0, False
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    events += 1
                    done = line == "data: [DONE]"
                    if hang_up and events == 3:
                        outcomes["hung up by the client"] += 1
                        return
            whole = response.status_code == 200 and done
            outcomes["whole" if whole else f"status {response.status_code}"] += 1
    except httpx.RemoteProtocolError:
        outcomes["cut short"] += 1
    except httpx.HTTPError as err:
        outcomes[type(err).__name__] += 1


async def drive(
    args: argparse.Namespace, url: str, lane_to_kill: Child
) -> tuple[Counter[str], str]:
    outcomes: Counter[str] = Counter()
    limits = httpx.Limits(max_connections=args.concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:
        async with trio.open_nursery() as nursery:
            for i in range(args.streams):
                nursery.start_soon(one_stream, client, url, i, outcomes)
                if i == args.kill_after:
                    lane_to_kill.send_signal(signal.SIGKILL)
                if i % 50 == 0:
                    await trio.sleep(0.05)  # pacing the load generator, not synchronisation
        metrics = (await client.get(f"{url}/metrics")).text
        after = await client.post(
            f"{url}/v1/completions", json={"model": "m", "prompt": "x", "max_tokens": 3}
        )
        outcomes[f"a request afterwards: {after.status_code}"] += 1
    return outcomes, metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--streams", type=int, default=1500)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--kill-after", type=int, default=300)
    parser.add_argument("--tokens-per-second", type=int, default=400)
    args = parser.parse_args()
    children: list[Child] = []
    try:
        lanes = []
        for i in range(3):
            argv = ["fake-vllm", "--port", "0", "--model", "m", "--lane-id", f"l{i}"]
            argv += ["--tokens-per-second", str(args.tokens_per_second), "--max-num-seqs", "64"]
            lane, lane_url = start(argv)
            children.append(lane)
            lanes.append(lane_url)
        argv = ["endpoint", "--port", "0", "--workers", str(args.workers)]
        endpoint, url = start([*argv, *(a for lane in lanes for a in ("--lane", f"m={lane}"))])
        children.append(endpoint)
        outcomes, metrics = trio.run(drive, args, url, children[0])
    finally:
        for child in reversed(children):
            child.send_signal(signal.SIGTERM)
        for child in reversed(children):
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()
        leftovers = kill_marked()
    log = children[-1].stderr.read() if children[-1].stderr else ""
    outstanding = re.findall(r"^ddsup_endpoint_lane_outstanding\{[^}]*\} (\S+)$", metrics, re.M)
    counters = [
        line
        for line in metrics.splitlines()
        if re.match(r"ddsup_endpoint_(requests|upstream_errors)_total", line)
    ]
    print(
        f"{args.streams} streams, {args.workers} worker(s), lane 0 killed after {args.kill_after}"
    )
    print(f"load average {os.getloadavg()[0]:.2f} at the end of the run")
    for what, count in sorted(outcomes.items()):
        print(f"  {what}: {count}")
    print("  " + "\n  ".join(counters))
    print(f"  in flight per lane: {outstanding}; log lines {len(log.splitlines())}")
    failures = []
    expected = {"whole", "hung up by the client", "cut short", "a request afterwards: 200"}
    if set(outcomes) - expected:
        failures.append(f"unexpected outcomes {set(outcomes) - expected}")
    if any(float(value) for value in outstanding) or not outstanding:
        failures.append(f"requests still counted in flight: {outstanding}")
    if "bug" in log or "Traceback" in log:
        failures.append("the endpoint logged a bug")
    if leftovers:
        failures.append(f"{leftovers} processes outlived the bench")
    print("checks:", "; ".join(failures) or "all passed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
