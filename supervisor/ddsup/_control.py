"""Operator commands: ``ddsup status``, ``ddsup stop``, ``ddsup logs``.

They act on the newest run in the current directory (or ``--state-dir``). A live run is
asked over its control channel (address in ``run.json``, secret in the 0600
``control.secret``); a finished run is described from ``plan.json``, ``events.jsonl`` and
``result.json``, so ``status`` also answers "what happened" after the fact. Everything
they read lives in the state directory, which is on the shared file system under Slurm:
the commands work from any node of the job (and from a login node that mounts it),
except that a live run's control channel must be reachable from there.

The ``--json`` shape of ``status`` is a documented interface (docs/operating.md) and
carries ``format``; fields are only ever added to it.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import trio

from ddsup._channel import Channel, ChannelError, connect_channel
from ddsup._console import duration, paint, symbol
from ddsup._errors import RunStateError, UsageError
from ddsup._events import read_events
from ddsup._state_dir import StateDir, newest_state_dir
from ddsup._supervisor_metrics import (
    current_pids,
    is_lane_replica,
    lane_counts,
    lane_models,
    probe_result,
    ready_seconds,
    render_supervisor_metrics,
)

STATUS_FORMAT = 1
ASK_TIMEOUT = 10.0
RESULT_WAIT = 30.0  # after the controller closed its channel: sweep (≤ 5 s) + result.json
FOLLOW_INTERVAL = 0.2


def _add_state_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        metavar="PATH",
        help="the run's state directory (default: the newest ./ddsup-* here)",
    )


def _state(args: argparse.Namespace) -> StateDir:
    if args.state_dir is not None:
        if not (args.state_dir / "run.json").is_file():
            raise RunStateError(f"{args.state_dir} is not a ddsup state directory (no run.json)")
        return StateDir(args.state_dir.resolve())
    return newest_state_dir()


def _events(state: StateDir) -> list[dict[str, Any]]:
    try:
        return read_events(state.events)
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as err:
        raise RunStateError(f"cannot read {state.events}: {err}") from err


def _result(state: StateDir) -> dict[str, Any] | None:
    return state.read_json(state.result) if state.result.exists() else None


# --- the control channel ------------------------------------------------------------------
async def _connect(state: StateDir) -> Channel | None:
    """An authenticated channel to the live run; None when nothing answers there."""
    run = state.read_json(state.run)
    control = run.get("control")
    if not control or state.result.exists():
        return None
    try:
        secret = state.secret.read_text().strip()
        return await connect_channel(
            f"{control['host']}:{control['port']}", secret, {"op": "hello", "role": "control"}
        )
    except (OSError, ChannelError):
        return None


async def _ask(state: StateDir, message: dict[str, Any]) -> dict[str, Any] | None:
    """Send one request to the live run; None when the run is no longer reachable."""
    channel = await _connect(state)
    if channel is None:
        return None
    try:
        await channel.send(message)
        with trio.move_on_after(ASK_TIMEOUT):
            return await channel.receive()
        return None
    except (ChannelError, trio.BrokenResourceError, OSError):
        return None
    finally:
        await channel.aclose()


# --- status ------------------------------------------------------------------------------
def configure_status(parser: argparse.ArgumentParser) -> None:
    _add_state_dir(parser)
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="machine-readable (docs/operating.md)")
    output.add_argument(
        "--metrics", action="store_true", help="the supervisor's metrics, Prometheus text"
    )


def run_status(args: argparse.Namespace) -> int:
    state = _state(args)
    if args.metrics:
        text = _metrics(state)
    else:
        data = status_data(state, trio.run(_ask, state, {"op": "status"}))
        if args.json:
            text = json.dumps(data, indent=2, sort_keys=True) + "\n"
        else:
            text = render_status(data, colour=_colour(sys.stdout)) + "\n"
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()
    return 0


def _colour(stream: Any) -> bool:
    """Colour and symbols only for a person at a terminal (https://no-color.org)."""
    tty = bool(getattr(stream, "isatty", lambda: False)())
    return tty and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"


def _metrics(state: StateDir) -> str:
    answer = trio.run(_ask, state, {"op": "metrics"})
    if answer is not None and isinstance(answer.get("text"), str):
        return str(answer["text"])
    snapshot = {**status_data(state, None), "uptime": None}
    return render_supervisor_metrics(snapshot, _events(state))


def status_data(state: StateDir, snapshot: dict[str, Any] | None) -> dict[str, Any]:
    """The documented ``status --json`` object, from a live snapshot or the run's files."""
    run = state.read_json(state.run)
    events = _events(state)
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
        "result": None if live else _result(state),
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
    lines[0] += " · " + _run_state(data, now)
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


def _run_state(data: dict[str, Any], now: float) -> str:
    result = data.get("result")
    if result:
        cause = result.get("cause") or {}
        who = f"{cause['unit']}: " if cause.get("unit") else ""
        reason = _one_line(str(cause.get("reason")))
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


# --- stop --------------------------------------------------------------------------------
def configure_stop(parser: argparse.ArgumentParser) -> None:
    _add_state_dir(parser)
    parser.add_argument("--no-wait", action="store_true", help="return without waiting for the end")


def run_stop(args: argparse.Namespace) -> int:
    state = _state(args)
    return trio.run(_stop, state, not args.no_wait)


async def _stop(state: StateDir, wait: bool) -> int:
    """Ask the run to stop (like SIGTERM to ``ddsup start``); a finished run is no error."""
    run = state.read_json(state.run)
    name = f"run {run.get('invocation_id')}"
    result = _result(state)
    if result is not None:
        print(f"ddsup: {name} has already finished: {_summary(result)}")
        return 0
    channel = await _connect(state)
    if channel is None:
        return await _stop_unreachable(state, run, name, wait)
    try:
        await channel.send({"op": "stop"})
        answer = await channel.receive()
        if answer is None or answer.get("op") != "stopping":
            raise RunStateError(f"{name} did not accept the stop request (answer: {answer})")
        print(f"ddsup: stopping {name} …", flush=True)
        if wait:
            await _drain(channel)  # the controller closes it once everything has stopped
    except ChannelError:
        pass  # it went away while we asked: it is stopping or has stopped
    finally:
        await channel.aclose()
    if wait:
        await _report_end(state, name)
    return 0


async def _stop_unreachable(state: StateDir, run: dict[str, Any], name: str, wait: bool) -> int:
    pid = _local_controller(run)
    if pid is None:
        print(f"ddsup: {name} is not running (no answer and no result.json: it was killed)")
        return 0
    os.kill(pid, signal.SIGTERM)  # still starting up, before its control channel listens
    print(f"ddsup: stopping {name} (SIGTERM to pid {pid}) …", flush=True)
    if wait:
        await _report_end(state, name)
    return 0


def _local_controller(run: dict[str, Any]) -> int | None:
    """The PID of this run's ``ddsup start`` when it lives on this host, else None."""
    import psutil

    try:
        process = psutil.Process(int(run["pid"]))
        started = process.create_time()
        cmdline = process.cmdline()
    except (psutil.Error, KeyError, TypeError, ValueError):
        return None
    mine = abs(started - float(run.get("started_at") or 0)) < 60 and "start" in cmdline
    return process.pid if mine else None


async def _drain(channel: Channel) -> None:
    while await channel.receive() is not None:
        pass


async def _report_end(state: StateDir, name: str) -> None:
    """Wait for ``result.json`` (written after the last sweep), then say how it ended."""
    with trio.move_on_after(RESULT_WAIT):
        while not state.result.exists():  # noqa: ASYNC110 (a file: no event to await)
            await trio.sleep(0.1)
    result = _result(state)
    if result is None:
        raise RunStateError(f"{name} did not write result.json within {RESULT_WAIT:g}s")
    print(f"ddsup: {name} stopped: {_summary(result)}")


def _summary(result: dict[str, Any]) -> str:
    cause = result.get("cause") or {}
    reason = _one_line(str(cause.get("reason")))
    return f"{result.get('status')}, exit {result.get('exit_code')} ({reason})"


def _one_line(text: str) -> str:
    """The first line of a cause (invalid unit files give one line per problem)."""
    first, *rest = text.splitlines() or [""]
    return f"{first} (+{len(rest)} more in result.json)" if rest else first


# --- logs --------------------------------------------------------------------------------
def configure_logs(parser: argparse.ArgumentParser) -> None:
    _add_state_dir(parser)
    parser.add_argument(
        "unit", metavar="UNIT", help="an instance (lane@3) or a unit (lane: all its instances)"
    )
    parser.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    parser.add_argument(
        "--since",
        metavar="WHEN",
        help="only output of processes alive since WHEN: a duration (10m) or an ISO time",
    )
    parser.add_argument(
        "-n", "--lines", type=int, metavar="N", help="only the last N lines (of each log)"
    )


def run_logs(args: argparse.Namespace) -> int:
    state = _state(args)
    since = parse_since(args.since) if args.since else None
    if args.lines is not None and args.lines < 0:
        raise UsageError("--lines must be 0 or more")
    names = _log_names(state, args.unit)
    if not names:
        known = sorted(p.stem for p in state.logs.glob("*.log"))
        raise UsageError(f"no log for {args.unit!r}; known: {', '.join(known) or 'none yet'}")
    reader = _LogReader(state, prefix=len(names) > 1 or args.unit.endswith("@"))
    events = _events(state) if since is not None else []
    for name in names:
        reader.add(name, since, events, args.lines)
    out = sys.stdout.buffer
    try:
        reader.emit(out, final=not args.follow)
        if args.follow:
            trio.run(_follow, reader, out, args.unit)
    except BrokenPipeError:
        _silence_stdout()
    except KeyboardInterrupt:
        return 130
    return 0


def _silence_stdout() -> None:
    """The reader went away (``| head``): stop writing, and let the exit flush go nowhere."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def parse_since(text: str) -> float:
    """``--since``: a duration back from now (``10m``, ``1h30m``) or an ISO 8601 time."""
    from ddsup._units._durations import parse_duration

    with contextlib.suppress(ValueError):
        return time.time() - parse_duration(text)
    try:
        moment = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(
            f"--since {text!r}: expected a duration (10m, 1h30m) or an ISO time "
            "(2026-12-02T14:30:00, local time unless it has an offset)"
        ) from None
    return moment.timestamp()  # naive: local time, as ``date`` prints it


def _log_names(state: StateDir, name: str) -> list[str]:
    """``lane@3`` (an instance, rank ``lane@3:1``, ``agent-n1``) or ``lane``/``lane@`` (all)."""
    planned = _planned(state)
    if state.log(name).exists() or name in planned:
        return [name]
    base = name.rstrip("@")
    found = {p.stem for p in state.logs.glob(f"{base}@*.log")}
    found |= {i for i in planned if i.startswith(f"{base}@")}
    return sorted(found, key=_natural)


def _planned(state: StateDir) -> list[str]:
    try:
        return [i["instance"] for i in state.read_json(state.plan).get("instances", [])]
    except RunStateError:
        return []


def _natural(name: str) -> tuple[Any, ...]:
    base, _, rest = name.partition("@")
    parts = rest.replace(":", "@").split("@")
    return (base, *(int(p) if p.isdigit() else p for p in parts))


class _LogReader:
    """Offsets into the log files chosen; prints whole lines from there on."""

    def __init__(self, state: StateDir, *, prefix: bool) -> None:
        self.state = state
        self.prefix = prefix
        self.offsets: dict[str, int] = {}

    def add(
        self, name: str, since: float | None, events: list[dict[str, Any]], lines: int | None
    ) -> None:
        if name in self.offsets:
            return
        path = self.state.log(name)
        start = 0 if since is None else since_offset(path, name, since, events)
        if lines is not None:
            start = tail_offset(path, start, lines)
        self.offsets[name] = start

    def emit(self, out: BinaryIO, *, final: bool) -> None:
        """Print what is new; a partial last line waits for its newline unless ``final``."""
        for name, offset in self.offsets.items():
            data = _read_from(self.state.log(name), offset)
            if not final and b"\n" in data:
                data = data[: data.rfind(b"\n") + 1]
            elif not final:
                data = b""
            if not data:
                continue
            self.offsets[name] = offset + len(data)
            out.write(b"".join(self._lines(name, data)))
        out.flush()

    def _lines(self, name: str, data: bytes) -> Iterator[bytes]:
        if not self.prefix:
            yield data
            return
        for line in data.splitlines(keepends=True):
            yield name.encode() + b": " + (line if line.endswith(b"\n") else line + b"\n")


def _read_from(path: Path, offset: int) -> bytes:
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            return handle.read()
    except FileNotFoundError:
        return b""


def since_offset(path: Path, instance: str, since: float, events: list[dict[str, Any]]) -> int:
    """Where the output of the processes alive at or after ``since`` begins in ``path``.

    Log lines carry no time, so the unit of selection is a process: a ``process`` event
    that records ``log_offset`` (the log's size when that process started) marks where
    its output begins; the first process still alive at ``since`` is the start. Without
    offsets the log file as a whole is the unit: all of it when it was written to since
    then (its modification time), none of it otherwise.
    """
    try:
        stat = path.stat()
    except FileNotFoundError:
        return 0
    if stat.st_mtime < since:
        return stat.st_size  # nothing was written since then
    starts: list[tuple[int, float | None]] = []  # (offset, end time or None while alive)
    for event in events:
        if event.get("instance") != instance:
            continue
        if event.get("event") == "process" and isinstance(event.get("log_offset"), int):
            starts.append((int(event["log_offset"]), None))
        elif event.get("event") == "unit" and "exit" in event and starts and starts[-1][1] is None:
            starts[-1] = (starts[-1][0], float(event["time"]))
    if starts:
        alive = [offset for offset, end in starts if end is None or end >= since]
        return min(alive[0], stat.st_size) if alive else stat.st_size
    return 0 if stat.st_mtime >= since else stat.st_size


def tail_offset(path: Path, start: int, lines: int) -> int:
    """The offset of the last ``lines`` lines of ``path`` at or after ``start``."""
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        return start
    with handle:
        end = handle.seek(0, os.SEEK_END)
        position, newlines = end, 0
        if lines == 0:
            return end
        while position > start:
            step = min(65536, position - start)
            position -= step
            handle.seek(position)
            block = handle.read(step)
            if position + step == end and block.endswith(b"\n"):
                block = block[:-1]  # the final newline ends the last line; it starts none
            for index in range(len(block) - 1, -1, -1):
                if block[index] == 0x0A:
                    newlines += 1
                    if newlines == lines:
                        return position + index + 1
        return start


async def _follow(reader: _LogReader, out: BinaryIO, unit: str) -> None:
    """Like ``tail -f`` until the run ends.

    The files may be written on other nodes through a shared file system, where no
    change notification reaches this node, so this polls (every 200 ms). Instances of a
    unit that start later are picked up as their log files appear.
    """
    while True:
        finished = reader.state.result.exists()
        for name in _log_names(reader.state, unit):
            reader.add(name, None, [], None)
        reader.emit(out, final=finished)
        if finished:
            return
        await trio.sleep(FOLLOW_INTERVAL)
