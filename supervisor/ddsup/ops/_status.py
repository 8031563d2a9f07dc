"""``ddsup status``: where every unit instance of a run is, live or after the fact.

The ``--json`` shape is a documented interface (docs/operating.md) and carries
``format``; fields are only ever added to it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import trio

from ddsup.ops._metrics import (
    current_pids,
    is_lane_replica,
    lane_counts,
    lane_models,
    probe_result,
    ready_seconds,
    render_supervisor_metrics,
)
from ddsup.ops._run_handle import (
    add_state_dir,
    ask,
    events_of,
    find_state,
    one_line,
    result_of,
    silence_stdout,
)
from ddsup.record._display import duration, paint, symbol
from ddsup.record._state_dir import StateDir

STATUS_FORMAT = 1


# --- status ------------------------------------------------------------------------------
def configure_status(parser: argparse.ArgumentParser) -> None:
    add_state_dir(parser)
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="machine-readable (docs/operating.md)")
    output.add_argument(
        "--metrics", action="store_true", help="the supervisor's metrics, Prometheus text"
    )


def run_status(args: argparse.Namespace) -> int:
    state = find_state(args)
    if args.metrics:
        text = _metrics(state)
    else:
        data = status_data(state, trio.run(ask, state, {"op": "status"}))
        if args.json:
            text = json.dumps(data, indent=2, sort_keys=True) + "\n"
        else:
            text = render_status(data, colour=_colour(sys.stdout)) + "\n"
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        silence_stdout()
    return 0


def _colour(stream: Any) -> bool:
    """Colour and symbols only for a person at a terminal (https://no-color.org)."""
    tty = bool(getattr(stream, "isatty", lambda: False)())
    return tty and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"


def _metrics(state: StateDir) -> str:
    """From the live snapshot when the run answers, else from its files (no uptime then)."""
    snapshot = trio.run(ask, state, {"op": "status"})
    data = status_data(state, snapshot)
    return render_supervisor_metrics(data, events_of(state))


def status_data(state: StateDir, snapshot: dict[str, Any] | None) -> dict[str, Any]:
    """The documented ``status --json`` object, from a live snapshot or the run's files."""
    run = state.read_json(state.run)
    events = events_of(state)
    live = snapshot is not None
    base = list(snapshot["instances"]) if snapshot is not None else _from_files(state, events)
    models = lane_models({"state_dir": str(state.path), "instances": base})
    pids, durations = current_pids(events), ready_seconds(events)
    instances = [_instance(i, models, pids, durations) for i in base]
    finished = [e for e in events if e.get("event") == "run" and e.get("reason") == "finished"]
    return {
        "format": STATUS_FORMAT,
        "invocation_id": run.get("invocation_id"),
        "launcher": (snapshot or {}).get("launcher") or run.get("launcher"),
        "state_dir": str(state.path),
        "unit_dir": run.get("unit_dir"),
        "pid": run.get("pid"),
        "started_at": run.get("started_at"),
        "ended_at": finished[-1]["time"] if finished else None,
        "uptime": (snapshot or {}).get("uptime"),
        "live": live,
        "stopping": bool((snapshot or {}).get("stopping")),
        "result": None if live else result_of(state),
        "lanes": lane_counts(instances, models),
        "instances": instances,
    }


def _instance(
    item: dict[str, Any],
    models: dict[str, str],
    pids: dict[str, int | None],
    durations: dict[str, float],
) -> dict[str, Any]:
    name = item["instance"]
    state = item.get("state", "inactive")
    pid = item.get("pid")
    if pid is None and state in ("starting", "ready", "stopping"):
        pid = pids.get(name)
    return {
        "instance": name,
        "unit": item.get("unit"),
        "type": item.get("type"),
        "node": item.get("node"),
        "model": models.get(name) if is_lane_replica(item) else None,
        "gpus": list(item.get("gpus") or []),
        "port": item.get("port"),
        "state": state,
        "since": item.get("since"),
        "pid": pid,
        "restarts": int(item.get("restarts") or 0),
        "last_exit": item.get("last_exit"),
        "reason": item.get("reason"),
        "probe": probe_result(item),
        "ready_seconds": durations.get(name),
    }


def _from_files(state: StateDir, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Instances of a finished (or unreachable) run: the plan, replayed through its events."""
    plan = state.read_json(state.plan) if state.plan.exists() else {"instances": []}
    records: dict[str, dict[str, Any]] = {}
    last_exit: dict[str, Any] = {}
    for event in events:
        if event.get("event") == "unit" and event.get("instance"):
            records.setdefault(event["instance"], {}).update(event)
            if event.get("exit") is not None:
                last_exit[event["instance"]] = event["exit"]
    instances = []
    for planned in plan.get("instances", []):
        record = records.get(planned["instance"], {})
        instances.append(
            {
                **{k: planned.get(k) for k in ("instance", "unit", "type", "node", "gpus", "port")},
                "state": record.get("to", "inactive"),
                "since": record.get("time"),
                "pid": None,
                "restarts": record.get("restarts", 0),
                "last_exit": last_exit.get(planned["instance"]),
                "reason": record.get("reason"),
            }
        )
    return instances


def render_status(data: dict[str, Any], *, colour: bool, now: float | None = None) -> str:
    """Human status: a header (run, uptime or result, lanes per model), one row per instance."""
    now = time.time() if now is None else now
    lines = [_paint_if(colour, "1", f"run {data['invocation_id']} · launcher {data['launcher']}")]
    lines[0] += " · " + _runfind_state(data, now)
    lines.append(f"state dir {data['state_dir']}")
    if data["lanes"]:
        per_model = [f"{m} {c['ready']}/{c['total']}" for m, c in data["lanes"].items()]
        lines.append("lanes ready: " + " · ".join(per_model))
    lines.append("")
    if data["instances"]:
        lines += _table(data["instances"], colour=colour, now=now)
    else:
        lines.append("no unit instances: the run ended before it had a plan")
    return "\n".join(lines)


def _runfind_state(data: dict[str, Any], now: float) -> str:
    result = data.get("result")
    if result:
        cause = result.get("cause") or {}
        who = f"{cause['unit']}: " if cause.get("unit") else ""
        reason = one_line(str(cause.get("reason")))
        text = f"finished: {result.get('status')}, exit {result.get('exit_code')} ({who}{reason})"
        if data.get("ended_at") and data.get("started_at"):
            ran = duration(data["ended_at"] - data["started_at"])
            text += f" · ran {ran}, ended {duration(now - data['ended_at'])} ago"
        return text
    if not data.get("live"):
        return "not answering and no result.json (killed?): state as of its last event"
    return f"up {duration(float(data.get('uptime') or 0))}" + (
        " · stopping" if data.get("stopping") else ""
    )


_COLUMNS = ("INSTANCE", "NODE", "STATE", "SINCE", "PID", "RESTARTS", "LAST EXIT", "GPUS", "PORT")


def _table(instances: list[dict[str, Any]], *, colour: bool, now: float) -> list[str]:
    header = (*_COLUMNS, "PROBE")
    rows = [header, *(_row(item, now) for item in instances)]
    widths = [max(len(r[c]) for r in rows) for c in range(len(header))]
    lines = []
    for index, row in enumerate(rows):
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=True)]
        if colour:
            state = instances[index - 1]["state"] if index else ""
            mark = symbol(state) if index else " "
            cells[2] = paint(state, f"{mark} {cells[2]}") if index else f"  {cells[2]}"
        lines.append("  ".join(cells).rstrip())
    return lines


def _row(item: dict[str, Any], now: float) -> tuple[str, ...]:
    since = duration(now - item["since"]) if item.get("since") else "-"
    return (
        item["instance"],
        str(item.get("node") or "-"),
        item["state"],
        since,
        str(item.get("pid") or "-"),
        str(item.get("restarts", 0)),
        describe_exit(item.get("last_exit")),
        ",".join(map(str, item.get("gpus") or [])) or "-",
        str(item.get("port") or "-"),
        str(item.get("probe") or "-"),
    )


def describe_exit(last: dict[str, Any] | None) -> str:
    if not last:
        return "-"
    if "code" in last:
        return f"code {last['code']}"
    return str(last.get("signal") or "-")


def _paint_if(colour: bool, code: str, text: str) -> str:
    return f"\x1b[{code}m{text}\x1b[0m" if colour else text
