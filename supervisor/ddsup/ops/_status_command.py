"""``ddsup status``: where every unit instance of a run is, live or after the fact.

The ``--json`` shape is a documented interface (docs/operating.md) and carries
``format``; fields are only ever added to it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from typing import TYPE_CHECKING

from ddsup import jobs, record
from ddsup._errors import DdsupError
from ddsup._exit import ExitStatus
from ddsup.channel import StatusReply, StatusRequest
from ddsup.ops._run_handle import (
    add_state_dir,
    ask,
    find_job,
    find_state,
    one_line,
    silence_stdout,
)
from ddsup.ops._status_view import StatusView, status_view
from ddsup.ops._supervisor_metrics import render_supervisor_metrics
from ddsup.record import (
    InstanceState,
    InstanceStatus,
    RunSnapshot,
    StateDir,
    duration,
    paint,
    symbol,
)

if TYPE_CHECKING:  # the efficiency's modules are imported for ``--json`` only
    from ddsup.record import EfficiencyJson


# --- status ------------------------------------------------------------------------------
def configure_status(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Show every unit instance of a run: node, state and since when, PID, restarts, "
        "last exit, GPUs, port, the model names a lane serves, readiness. A live run is "
        "asked over its control channel; a finished or killed one is read from its state "
        "directory."
    )
    add_state_dir(parser)
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="machine-readable (docs/operating.md)")
    output.add_argument(
        "--metrics", action="store_true", help="the supervisor's metrics, Prometheus text"
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also the no-orphan layers that hold on each node (docs/no-orphans.md)",
    )


def run_status(args: argparse.Namespace) -> int:
    job = find_job(args)
    if job is None:
        text = _run_text(args, find_state(args), None)
    elif job.run is None:  # nothing of ddsup's to show: Slurm's view alone
        text = _job_only(job, as_json=args.json)
    else:
        text = _run_text(args, job.run.state, job)
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        silence_stdout()
    return 0


def _run_text(args: argparse.Namespace, state: StateDir, job: jobs.JobView | None) -> str:
    view = status_view(state, _snapshot(state))
    if args.metrics:  # from the live snapshot when the run answers, else from its files
        return render_supervisor_metrics(view.instances, view.uptime)
    if args.json:
        data = {**view.to_json(), "efficiency": _efficiency(state)}
        if job is not None:
            data["job"] = job.to_json()
        return json.dumps(data, indent=2, sort_keys=True) + "\n"
    text = render_status(view, colour=_colour(sys.stdout), verbose=args.verbose) + "\n"
    return text if job is None else "\n".join(job_lines(job)) + "\n" + text


def _job_only(job: jobs.JobView, *, as_json: bool) -> str:
    """A job ddsup has not started in (yet): Slurm's view, and its batch output's end."""
    if as_json:
        return json.dumps({"job": job.to_json()}, indent=2, sort_keys=True) + "\n"
    lines = job_lines(job)
    output = job.submission.batch_output if job.submission is not None else None
    last = jobs.tail(output) if output is not None else []
    if last:
        lines += ["", f"the end of {output}:", *(f"  {line}" for line in last)]
    return "\n".join(lines) + "\n"


def job_lines(job: jobs.JobView) -> list[str]:
    """``job 42 (llama-batch): RUNNING on n[1-4] since …`` and where the answer came from."""
    name = f" ({job.submission.job_name})" if job.submission is not None else ""
    return [f"job {job.job_id}{name}: {job.summary}", *(f"  note: {n}" for n in job.notes)]


def _efficiency(state: StateDir) -> EfficiencyJson | None:
    """Where the run's GPU time went so far (docs/operating.md); None before it had a plan.

    ``record.efficiency_json`` is looked up here, so its modules (which read a whole run
    back) are imported for ``--json`` only: ``ddsup.record`` imports a name when first used.
    """
    if not state.plan.exists():
        return None
    try:
        return record.efficiency_json(state.path)
    except (DdsupError, OSError, ValueError):
        return None  # a torn or foreign file: status still answers


def _snapshot(state: StateDir) -> RunSnapshot | None:
    """The live run's answer, or None when it does not answer (finished, killed, far)."""
    answer = ask(state, StatusRequest())
    return answer.snapshot if isinstance(answer, StatusReply) else None


def _colour(stream: object) -> bool:
    """Colour and symbols only for a person at a terminal (https://no-color.org)."""
    tty = bool(getattr(stream, "isatty", lambda: False)())
    return tty and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"


def render_status(
    view: StatusView, *, colour: bool, now: float | None = None, verbose: bool = False
) -> str:
    """Human status: a header (run, uptime or result, lanes per model), one row per instance;
    ``verbose``: the no-orphan layers too (they hold or not for the whole run: a person
    asking where the run is wants its instances, a person checking the machinery asks)."""
    now = time.time() if now is None else now
    lines = [_paint_if(colour, "1", f"run {view.invocation_id} · launcher {view.launcher}")]
    lines[0] += " · " + _run_state(view, now)
    lines.append(f"state dir {view.state_dir}")
    if view.attempt:
        earlier = "the one before" if view.attempt == 1 else f"the {view.attempt} before"
        lines[-1] += f" · attempt {view.attempt} ({earlier} in attempts/)"
    if view.result is not None and view.record_incomplete:
        lines.append(
            f"record incomplete: {view.record_incomplete}; the states below are as of the "
            "last event written"
        )
    if view.lanes:
        per_model = [f"{m} {c.ready}/{c.total}" for m, c in view.lanes.items()]
        lines.append("lanes ready: " + " · ".join(per_model))
    if verbose:
        lines += _containment_lines(view)
    if view.endpoint is not None:
        workers = ", ".join(str(pid) for pid in view.endpoint.workers)
        lines.append(
            f"endpoint pid {view.endpoint.pid} · port {view.endpoint.port} · workers {workers}"
        )
    lines.append("")
    if view.instances:
        lines += _table(view.instances, colour=colour, now=now)
        lines += _waiting_lines(view.instances, now)
    else:
        lines.append("no unit instances: the run ended before it had a plan")
    return "\n".join(lines)


def _waiting_lines(instances: tuple[InstanceStatus, ...], now: float) -> list[str]:
    """Below the table, what the waiting instances wait for: their stagger turn and when it
    comes, or what holds them (``reason``: a dependency, ``max_loading``, ``min_ready``)."""
    turns = [i for i in instances if i.state is InstanceState.WAITING and i.until is not None]
    held: dict[str, list[InstanceStatus]] = {}
    for item in instances:
        if item.state is InstanceState.WAITING and item.until is None:
            held.setdefault(item.reason or "for its turn", []).append(item)
    lines = [f"waiting: {_names(items)} {why}" for why, items in held.items()]
    if turns:
        ends = sorted(i.until for i in turns if i.until is not None)
        clock = time.strftime("%H:%M:%S", time.localtime(ends[-1]))
        soonest, latest = duration(ends[0] - now), duration(ends[-1] - now)
        span = soonest if len(ends) == 1 else f"{soonest} … {latest}"
        whose = "its stagger turn" if len(turns) == 1 else "their stagger turns"
        lines.append(f"waiting: {_names(turns)} for {whose}, in {span} (until {clock})")
    return ["", *lines] if lines else []


def _names(items: list[InstanceStatus]) -> str:
    """``lane@3``, ``lane@3, lane@4``, or ``lane@8 … lane@15 (8)``: in plan order."""
    if len(items) <= _LISTED:
        return ", ".join(i.instance for i in items)
    return f"{items[0].instance} … {items[-1].instance} ({len(items)})"


def _containment_lines(view: StatusView) -> list[str]:
    """One line per set of layers, naming the supervisors that hold it (no-orphans.md):
    ``ddsup start`` and 128 agents are two lines, not 129."""
    if not view.containment:
        return []
    groups: dict[str, list[str]] = {}
    for c in view.containment:
        label = c.supervisor if c.node is None else f"{c.supervisor} ({c.node})"
        groups.setdefault(c.summary, []).append(label)
    if len(groups) == 1:
        return [f"no-orphan layers: {view.containment[0].summary}"]
    return [f"no-orphan layers of {_who(labels)}: {summary}" for summary, labels in groups.items()]


_LISTED = 3  # supervisors named on a line; more are counted, the first and last named


def _who(labels: list[str]) -> str:
    """The supervisors of one line, in node order (``node2`` before ``node10``)."""
    labels = sorted(labels, key=_natural)
    if len(labels) <= _LISTED:
        return ", ".join(labels)
    return f"{len(labels)} supervisors ({labels[0]} … {labels[-1]})"


def _natural(label: str) -> list[tuple[int, str]]:
    """Sort key: runs of digits as numbers, the rest as text."""
    return [(int(part), "") if part.isdigit() else (-1, part) for part in re.split(r"(\d+)", label)]


def _run_state(view: StatusView, now: float) -> str:
    result = view.result
    if result is not None:
        who = f"{result.unit}: " if result.unit else ""
        text = f"finished: {result.status.value}, exit {result.exit_code} ({who}{one_line(result.reason)})"
        if view.ended_at and view.started_at:
            ran = duration(view.ended_at - view.started_at)
            text += f" · ran {ran}, ended {duration(now - view.ended_at)} ago"
        return text
    if not view.live and view.record_incomplete:
        return (
            f"not answering and no result.json: {view.record_incomplete}, so it may have "
            "ended without writing it: state as of its last event"
        )
    if not view.live:
        return "not answering and no result.json (killed?): state as of its last event"
    text = f"up {duration(view.uptime or 0.0)}"
    if view.time_left is not None:
        text += f" · job ends in {duration(view.time_left)}"
    return text + (" · stopping" if view.stopping else "")


_COLUMNS = (
    "INSTANCE", "NODE", "RANK", "STATE", "SINCE", "PID", "RESTARTS", "LAST EXIT", "GPUS",
    "PORT", "MODEL", "ATTEMPT", "PROBE",
)  # fmt: skip
_RANK = _COLUMNS.index("RANK")
_UUID_SHOWN = 12  # characters of a GPU or MIG UUID shown in the table (--json has all)


def _table(instances: tuple[InstanceStatus, ...], *, colour: bool, now: float) -> list[str]:
    """The rows; the RANK column only when a lane spans nodes (its replica's ranks)."""
    ranks = any(item.nnodes > 1 for item in instances)
    rows = [_COLUMNS, *(_row(item, now) for item in instances)]
    if not ranks:
        rows = [row[:_RANK] + row[_RANK + 1 :] for row in rows]
    state_column = _COLUMNS.index("STATE") - (0 if ranks else 1)
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    lines = []
    for index, row in enumerate(rows):
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=True)]
        if colour and index:
            state = instances[index - 1].state
            cells[state_column] = paint(state, f"{symbol(state)} {cells[state_column]}")
        elif colour:  # the header starts where the column does: at the rows' symbol
            cells[state_column] = f"{cells[state_column]}  "
        lines.append("  ".join(cells).rstrip())
    return lines


def _row(item: InstanceStatus, now: float) -> tuple[str, ...]:
    since = duration(now - item.since) if item.since else "-"
    return (
        item.instance,
        item.node or "-",
        f"{item.rank}/{item.nnodes}" if item.nnodes > 1 else "-",
        item.state.value,
        since,
        str(item.pid or "-"),
        str(item.restarts),
        describe_exit(item.last_exit),
        _gpus(item),
        str(item.port or "-"),
        ",".join(item.served_names) or item.model or "-",
        item.attempt_text or "-",
        item.probe or "-",
    )


def _gpus(item: InstanceStatus) -> str:
    """The GPUs as the lane sees them (its CUDA_VISIBLE_DEVICES), UUIDs shortened."""
    if not item.devices:
        return ",".join(map(str, item.gpus)) or "-"
    return ",".join(d if len(d) <= _UUID_SHOWN else d[:_UUID_SHOWN] + "…" for d in item.devices)


def describe_exit(last: ExitStatus | None) -> str:
    if last is None:
        return "-"
    if last.code is not None:
        return f"code {last.code}"
    return last.signal_name()


def _paint_if(colour: bool, code: str, text: str) -> str:
    return f"\x1b[{code}m{text}\x1b[0m" if colour else text
