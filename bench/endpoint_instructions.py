"""Instructions per request: the endpoint under callgrind, least-load beside prefix routing.

A CPU-time figure on a shared 2-core machine moves by a tenth from one run to the next,
as much as prefix routing adds to a request, so ``endpoint_compare.py`` cannot tell a
change of the routing's cost from the machine's mood. Instructions move less with the
machine (a few percent between runs of one tree, more while other work loads the
machine: run it on an idle one): each endpoint runs under ``valgrind --tool=callgrind`` in front of the same two
fast lanes (``Upstream`` of ``endpoint_servers.py``), wrk sends ``--connections``
requests at a time for ``--seconds`` after a warm-up, and the instructions the endpoint
executed meanwhile (counters zeroed after the warm-up, dumped after the run) are divided
by the requests it answered. Plain requests (one prompt) and templated prompts (64
templates of about 300 tokens, 8 records each), the bodies of ``endpoint_compare.py``.

Instructions are not time: code that misses caches costs more per instruction. They say
how much work a request takes, and a ratio of them is free of the machine's load; the
time per request stays ``endpoint_compare.py``'s figure. Under callgrind the endpoint is
the bottleneck (about 50 times slower), so the lanes never queue and prefix routing's
one-lane skew on the plain prompt costs nothing here. ``--baseline REV`` adds the
endpoint of that git revision (``side_by_side.py``): a change's before and after.

    .venv/bin/python bench/endpoint_instructions.py [--seconds 20] [--baseline main]

Needs valgrind and wrk (``apt-get install -y valgrind wrk``); takes about 4 minutes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from endpoint_compare import PLAIN, TEMPLATED
from endpoint_servers import Child, first_line_url, server_argv, start, stop_all, wait_port, wrk
from side_by_side import baseline_code, baseline_env

BODIES = {"plain": PLAIN, "templated": TEMPLATED}


def instructions(
    name: str,
    argv: list[str],
    env: dict[str, str] | None,
    body: str | Sequence[str],
    args: argparse.Namespace,
) -> float:
    """Instructions per request of one endpoint under callgrind."""
    out = args.tmp / "callgrind"  # one endpoint at a time: its files go after it
    grind = [
        "valgrind",
        "--tool=callgrind",
        f"--log-file={out}.log",
        f"--callgrind-out-file={out}.%p",
    ]
    proc = start([*grind, *argv], {0}, env)
    try:
        url = first_line_url(proc)
        wrk(f"{url}/v1/completions", body, args.warmup, args.connections, args.load)
        subprocess.run(["callgrind_control", "-z", str(proc.pid)], capture_output=True, check=True)
        run = wrk(f"{url}/v1/completions", body, args.seconds, args.connections, args.load)
        subprocess.run(["callgrind_control", "-d", str(proc.pid)], capture_output=True, check=True)
    finally:
        stop_all([proc])
    dumps = sorted(args.tmp.glob(f"{out.name}.{proc.pid}.*"))
    if not dumps or run.non2xx:
        raise SystemExit(f"{name}: no dump, or {run.non2xx} answers other than 2xx")
    total = _total(dumps[0])
    for dump in args.tmp.glob(f"{out.name}.*"):
        dump.unlink()
    return total / run.requests


def _total(dump: Path) -> int:
    with dump.open(errors="replace") as lines:
        for line in lines:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise SystemExit(f"{dump}: callgrind wrote no total")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20, help="wrk time measured")
    parser.add_argument("--warmup", type=float, default=8, help="wrk time before it")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--baseline", metavar="REV", help="also the endpoint of this revision")
    args = parser.parse_args()
    for tool in ("valgrind", "callgrind_control", "wrk"):
        if not shutil.which(tool):
            raise SystemExit(f"{tool} is needed: apt-get install -y valgrind wrk")
    cpus = sorted(os.sched_getaffinity(0))
    args.load = set(cpus[1:]) or set(cpus)  # the endpoint has cpus[0]
    args.tmp = Path(tempfile.mkdtemp(prefix="ddsup-instructions-"))
    children: list[Child] = []
    try:
        urls = []
        for i in range(2):
            children.append(start(server_argv("upstream", args.tmp / f"up{i}"), args.load))
            urls.append(f"http://127.0.0.1:{wait_port(args.tmp / f'up{i}')}")
        argv = [sys.executable, "-m", "ddsup", "endpoint", "--port", "0", "--workers", "1"]
        argv += [a for url in urls for a in ("--lane", f"m={url}")]
        trees: list[tuple[str, dict[str, str] | None]] = [("", None)]
        if args.baseline:
            source = baseline_code(args.baseline, args.tmp / "baseline")
            trees.append((f"{args.baseline} ", baseline_env(source)))
        print(f"instructions per request (callgrind), {args.connections} connections")
        for kind, body in BODIES.items():
            least = 0.0
            for tree, env in trees:
                for policy in ("least-load", "prefix"):
                    name = f"{tree}{policy}"
                    per = instructions(name, [*argv, "--routing", policy], env, body, args)
                    least = least or per
                    print(f"  {kind:9} {name:24} {per:9,.0f}  ({per / least:.3f}×)", flush=True)
    finally:
        stop_all(children)
        shutil.rmtree(args.tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
