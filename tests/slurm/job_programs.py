"""Small lanes and workers that the Slurm tests' unit files run inside real jobs.

Run as ``python3 job_programs.py lane|worker …`` by ddsup itself (on the cluster's
nodes), so this file imports the standard library only and nothing of the test suite.
Each program does one observable thing the tests assert on: a lane serves HTTP 200 on
every path (so an ``http`` readiness probe can pass) and can be told to fail; a worker
queries the lanes of ``plan.json``, waits for an event in ``events.jsonl``, or records
the signals it receives. Everything they learn goes to files in the run's state
directory, never only to their logs.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import signal
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

WAIT_LIMIT_S = 60.0
"""A worker that waits for something gives up after this (exit 3), so a broken run ends."""


class _Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"ok\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


def _state_dir() -> Path:
    return Path(os.environ["DDSUP_STATE_DIR"])


def _applies(args: argparse.Namespace) -> bool:
    """Whether ``--exit-code`` applies to this start (``--only`` filter, once-only marker)."""
    if args.only is not None and args.me != args.only:
        return False
    if args.once:
        marker = _state_dir() / args.once
        try:
            marker.open("x").close()
        except FileExistsError:
            return False
    return True


def lane(args: argparse.Namespace) -> int:
    """Serve HTTP on ``--port``; optionally record specifiers, optionally exit early."""
    if args.record:
        record = {"argv": args.spec, "rank_env": os.environ.get("DDSUP_LANE_RANK")}
        record["node"] = os.environ.get("DDSUP_NODE")
        path = _state_dir() / args.record
        path.with_suffix(".tmp").write_text(json.dumps(record))
        path.with_suffix(".tmp").rename(path)
    if args.graceful is not None:
        signal.signal(signal.SIGTERM, lambda signum, frame: _graceful_exit(args))
    fail = args.exit_code is not None and _applies(args)
    if fail and args.after == 0 and not args.fail_on_file:
        return int(args.exit_code)
    if args.port:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), _Ok)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        if args.stamp:
            (_state_dir() / f"listening-{args.me}").write_text(f"{time.time():.6f}\n")
    if args.fail_on_file:
        trigger = _state_dir() / args.fail_on_file
        while not trigger.exists():  # a file the test creates: no event to wait on
            time.sleep(0.05)
        return int(args.exit_code or 1)
    time.sleep(args.after if fail else 1e6)
    return int(args.exit_code) if fail else 0


def _graceful_exit(args: argparse.Namespace) -> None:
    """On SIGTERM: take ``--graceful`` seconds (a server draining), record it, exit 0."""
    time.sleep(args.graceful)
    (_state_dir() / f"graceful-{args.me}").write_text("done\n")
    os._exit(0)


def _completion(url: str, model: str) -> str:
    body = json.dumps({"model": model, "prompt": "hello", "max_tokens": 4}).encode()
    request = urllib.request.Request(
        f"{url}/v1/completions", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        answer = json.load(response)
    return str(answer["choices"][0]["text"])


def query_lanes(args: argparse.Namespace) -> int:
    """Send one completion to every lane of ``plan.json``; record which lanes answered."""
    plan = json.loads((_state_dir() / "plan.json").read_text())
    addresses = {node["name"]: node["address"] for node in plan["nodes"]}
    answered = {}
    for item in plan["instances"]:
        if item["type"] == "lane" and not item["rank"]:
            url = f"http://{addresses[item['node']]}:{item['port']}"
            answered[item["instance"]] = {
                "node": item["node"],
                "text": _completion(url, args.model),
            }
    (_state_dir() / "answers.json").write_text(json.dumps(answered))
    return 0


def _events() -> list[dict[str, Any]]:
    text = (_state_dir() / "events.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines() if line.endswith("}")]


def await_restart(args: argparse.Namespace) -> int:
    """Exit 0 once ``--instance`` went restarting → … → ready; 3 after WAIT_LIMIT_S."""
    deadline = time.monotonic() + WAIT_LIMIT_S
    while time.monotonic() < deadline:
        states = [e.get("to") for e in _events() if e.get("instance") == args.instance]
        if "restarting" in states and "ready" in states[states.index("restarting") :]:
            return 0
        time.sleep(0.05)
    return 3


def await_signal(args: argparse.Namespace) -> int:
    """Append each signal's name to ``--marker``; exit 0 after SIGUSR1, 143 after SIGTERM."""
    marker = _state_dir() / args.marker
    got: list[int] = []

    def record(signum: int, frame: object) -> None:
        with marker.open("a") as out:
            out.write(f"{signal.Signals(signum).name} {time.time():.3f}\n")
        got.append(signum)

    signal.signal(signal.SIGUSR1, record)
    signal.signal(signal.SIGTERM, record)
    deadline = time.monotonic() + args.limit
    while not got and time.monotonic() < deadline:
        time.sleep(0.05)
    if not got:
        return 3
    if got[0] == signal.SIGTERM and args.term_exit is not None:
        return int(args.term_exit)
    return 0 if got[0] == signal.SIGUSR1 else 128 + got[0]


def attempts(args: argparse.Namespace) -> int:
    """Append ``$DDSUP_ATTEMPT`` to ``--record``; ask for a requeue (``$DDSUP_REQUEUE_EXIT``)
    on every attempt before ``--until``, exit 0 on that one."""
    attempt = int(os.environ["DDSUP_ATTEMPT"])
    with open(args.record, "a") as out:
        out.write(f"{attempt} {os.environ['DDSUP_STATE_DIR']}\n")
    return 0 if attempt >= args.until else int(os.environ["DDSUP_REQUEUE_EXIT"])


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="job_programs.py")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("lane", help="an HTTP lane that can fail on cue")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--exit-code", type=int, default=None, help="exit with this status …")
    p.add_argument("--after", type=float, default=0.0, help="… this many seconds after start")
    p.add_argument("--only", default=None, help="… only when --me is this (node, instance)")
    p.add_argument("--me", default=None, help="this lane's name for --only, e.g. {instance}")
    p.add_argument("--once", default=None, help="… only if this state-dir marker is absent")
    p.add_argument("--fail-on-file", default=None, help="… once this state-dir file exists")
    p.add_argument("--stamp", action="store_true", help="write listening-<me>: when bound")
    p.add_argument("--graceful", type=float, default=None, help="SIGTERM: exit after (s)")
    p.add_argument("--record", default=None, help="state-dir file for specifiers and env")
    p.add_argument("spec", nargs="*", help="resolved specifiers to record")
    p.set_defaults(func=lane)
    p = sub.add_parser("query-lanes", help="one completion per lane of plan.json")
    p.add_argument("--model", required=True)
    p.set_defaults(func=query_lanes)
    p = sub.add_parser("await-restart", help="wait for a restart of one instance")
    p.add_argument("--instance", required=True)
    p.set_defaults(func=await_restart)
    p = sub.add_parser("await-signal", help="record the first signal and exit")
    p.add_argument("--marker", required=True)
    p.add_argument("--limit", type=float, default=WAIT_LIMIT_S, help="give up after (s)")
    p.add_argument("--term-exit", type=int, default=None, help="exit status after SIGTERM")
    p.set_defaults(func=await_signal)
    p = sub.add_parser("attempts", help="record the attempt; requeue until --until")
    p.add_argument("--record", required=True, help="a file that outlives the attempts")
    p.add_argument("--until", type=int, default=1)
    p.set_defaults(func=attempts)
    return parser


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
