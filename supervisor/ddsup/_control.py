"""Operator commands: ``ddsup status``, ``ddsup stop``, ``ddsup logs``.

They act on the newest run in the current directory (or ``--state-dir``). A live run is
asked over its control channel (address in ``run.json``, secret in the 0600
``control.secret``); a finished run is described from ``events.jsonl`` and
``result.json``, so ``status`` also answers "what happened" after the fact.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import trio

from ddsup._channel import ChannelError, connect_channel
from ddsup._errors import RunStateError, UsageError
from ddsup._events import read_events
from ddsup._state_dir import StateDir, newest_state_dir

STATE_SYMBOLS = {
    "ready": "●",
    "starting": "◐",
    "waiting": "○",
    "restarting": "↻",
    "stopping": "◑",
    "exited": "○",
    "failed": "✗",
    "inactive": "·",
}
STATE_COLOURS = {
    "ready": "32",
    "failed": "31",
    "restarting": "33",
    "starting": "33",
    "stopping": "33",
}


def _add_state_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        metavar="PATH",
        help="the run's state directory (default: newest ./ddsup-*)",
    )


def _state(args: argparse.Namespace) -> StateDir:
    if args.state_dir is not None:
        if not (args.state_dir / "run.json").is_file():
            raise RunStateError(f"{args.state_dir} is not a ddsup state directory (no run.json)")
        return StateDir(args.state_dir.resolve())
    return newest_state_dir()


async def _ask(state: StateDir, message: dict[str, Any]) -> dict[str, Any] | None:
    """Send one request to the live run; None when the run is no longer reachable."""
    run = state.read_json(state.run)
    control = run.get("control")
    if not control or state.result.exists():
        return None
    try:
        secret = state.secret.read_text().strip()
        channel = await connect_channel(
            f"{control['host']}:{control['port']}", secret, {"op": "hello", "role": "control"}
        )
    except (OSError, ChannelError):
        return None
    try:
        await channel.send(message)
        with trio.move_on_after(10):
            return await channel.receive()
        return None
    except ChannelError:
        return None
    finally:
        await channel.aclose()


# --- status ---------------------------------------------------------------------------
def configure_status(parser: argparse.ArgumentParser) -> None:
    _add_state_dir(parser)
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run_status(args: argparse.Namespace) -> int:
    state = _state(args)
    snapshot = trio.run(_ask, state, {"op": "status"})
    data = snapshot if snapshot is not None else _from_files(state)
    data.pop("op", None)
    if args.json:
        print(json.dumps(data, indent=2, sort_keys=True))
    else:
        print(render_status(data, colour=sys.stdout.isatty()))
    return 0


def _from_files(state: StateDir) -> dict[str, Any]:
    """A finished (or unreachable) run, reconstructed from its files."""
    run = state.read_json(state.run)
    plan = state.read_json(state.plan) if state.plan.exists() else {"instances": []}
    records: dict[str, dict[str, Any]] = {}
    for event in read_events(state.events) if state.events.exists() else []:
        if event.get("event") == "unit" and event.get("instance"):
            records.setdefault(event["instance"], {}).update(event)
    instances = []
    for planned in plan.get("instances", []):
        record = records.get(planned["instance"], {})
        instances.append(
            {
                "instance": planned["instance"],
                "unit": planned["unit"],
                "type": planned["type"],
                "node": planned["node"],
                "gpus": planned["gpus"],
                "port": planned["port"],
                "state": record.get("to", "inactive"),
                "since": record.get("time"),
                "pid": None,
                "restarts": record.get("restarts", 0),
                "last_exit": record.get("exit"),
                "reason": record.get("reason"),
            }
        )
    result = state.read_json(state.result) if state.result.exists() else None
    return {
        "invocation_id": run.get("invocation_id"),
        "launcher": run.get("launcher"),
        "started_at": run.get("started_at"),
        "state_dir": str(state.path),
        "uptime": None,
        "stopping": False,
        "finished": result,
        "instances": instances,
    }


def render_status(data: dict[str, Any], *, colour: bool) -> str:
    """Human status: a header, lanes ready per model, one row per instance."""
    lines = [
        f"run {data.get('invocation_id')} · launcher {data.get('launcher')} · state {data.get('state_dir')}"
    ]
    if data.get("finished"):
        result = data["finished"]
        lines.append(
            f"finished: {result.get('status')} (exit {result.get('exit_code')}) — {result.get('cause', {}).get('reason')}"
        )
    elif data.get("uptime") is not None:
        lines.append(
            f"running for {_duration(float(data['uptime']))}"
            + (" · stopping" if data.get("stopping") else "")
        )
    lanes = [i for i in data["instances"] if i["type"] == "lane" and ":" not in i["instance"]]
    if lanes:
        ready = sum(1 for i in lanes if i["state"] == "ready")
        lines.append(f"lanes ready {ready}/{len(lanes)}")
    header = ("INSTANCE", "NODE", "STATE", "SINCE", "PID", "RESTARTS", "LAST EXIT", "GPUS", "PORT")
    rows = [header]
    now = time.time()
    for item in data["instances"]:
        since = _duration(now - item["since"]) if item.get("since") else "-"
        last = item.get("last_exit") or {}
        last_text = f"code {last['code']}" if "code" in last else (last.get("signal") or "-")
        rows.append(
            (
                item["instance"],
                item["node"],
                item["state"],
                since,
                str(item.get("pid") or "-"),
                str(item.get("restarts", 0)),
                str(last_text),
                ",".join(map(str, item.get("gpus") or [])) or "-",
                str(item.get("port") or "-"),
            )
        )
    widths = [max(len(r[c]) for r in rows) for c in range(len(header))]
    for index, row in enumerate(rows):
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=True)]
        if index and colour:
            state = row[2]
            code = STATE_COLOURS.get(state)
            symbol = STATE_SYMBOLS.get(state, " ")
            cells[2] = f"\x1b[{code}m{symbol} {cells[2]}\x1b[0m" if code else f"{symbol} {cells[2]}"
        elif colour:
            cells[2] = "  " + cells[2]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


# --- stop -----------------------------------------------------------------------------
def configure_stop(parser: argparse.ArgumentParser) -> None:
    _add_state_dir(parser)
    parser.add_argument("--no-wait", action="store_true", help="return without waiting for the end")


def run_stop(args: argparse.Namespace) -> int:
    state = _state(args)
    answer = trio.run(_ask, state, {"op": "stop"})
    if answer is None:
        print("ddsup: the run has already finished", file=sys.stderr)
        return 0
    if not args.no_wait:
        trio.run(_wait_for_result, state)
    return 0


async def _wait_for_result(state: StateDir) -> None:
    """Wait until the controller process has exited (a pidfd turns readable at exit)."""
    pid = int(state.read_json(state.run)["pid"])
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        await trio.lowlevel.wait_readable(fd)
    finally:
        os.close(fd)


# --- logs -----------------------------------------------------------------------------
def configure_logs(parser: argparse.ArgumentParser) -> None:
    _add_state_dir(parser)
    parser.add_argument(
        "unit", metavar="UNIT", help="an instance (lane@3) or a unit (lane: all instances)"
    )
    parser.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")


def run_logs(args: argparse.Namespace) -> int:
    state = _state(args)
    paths = _log_paths(state, args.unit)
    if not paths:
        known = sorted(p.stem for p in state.logs.glob("*.log"))
        raise UsageError(f"no log for {args.unit!r}; known: {', '.join(known) or 'none yet'}")
    prefix = len(paths) > 1
    offsets = {p: 0 for p in paths}
    _print_new(offsets, prefix)
    if args.follow:
        try:
            trio.run(_follow, state, offsets, prefix)
        except KeyboardInterrupt:
            return 130
    return 0


def _log_paths(state: StateDir, name: str) -> list[Path]:
    exact = state.log(name)
    if exact.exists():
        return [exact]
    base = name.rstrip("@")
    return sorted(p for p in state.logs.glob(f"{base}@*.log"))


def _print_new(offsets: dict[Path, int], prefix: bool) -> None:
    for path, offset in offsets.items():
        try:
            with path.open("rb") as handle:
                handle.seek(offset)
                data = handle.read()
        except FileNotFoundError:
            continue
        if not data:
            continue
        end = data.rfind(b"\n") + 1 if not data.endswith(b"\n") and b"\n" in data else len(data)
        offsets[path] = offset + end
        text = data[:end].decode(errors="replace")
        out = "".join(f"{path.stem}: {line}\n" for line in text.splitlines()) if prefix else text
        sys.stdout.write(out)
    sys.stdout.flush()


async def _follow(state: StateDir, offsets: dict[Path, int], prefix: bool) -> None:
    """Like ``tail -f``: files have no change event in the stdlib, so poll every 200 ms."""
    while True:
        await trio.sleep(0.2)
        _print_new(offsets, prefix)
        if state.result.exists():
            _print_new(offsets, prefix)
            return
