"""The timeline: one row per instance (or per node's lanes), grouped by node.

A row shows the instance's states as coloured bars (waiting, loading, ready, restarting,
stopping, failed), its lane's serving time over the ready bar (dark where it had a
request outstanding at least half the time, lighter where less), and marks: ▼ a
restart, a red bar an exit ddsup did not ask for, ◆ a failure. Vertical lines mark the
first request, the last one's end and the stop. Every shape has a hover title.

With many lanes a node's lanes share one row that stacks, per 2-pixel column, the share
of their GPU time in each category; lanes are then too many to tell apart by eye, and
the per-lane numbers are in the efficiency table.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from ddsup.ops.report._report_data import NodeGroup, Report, Row
from ddsup.ops.report._svg import Axis, clock, duration, elapsed, esc, num, rect, svg
from ddsup.record import LaneSamples, Mark, MarkKind

LABEL_W, PLOT_W, RIGHT = 210.0, 900.0, 16.0
WIDTH = LABEL_W + PLOT_W + RIGHT
TOP, ROW_H, GAP, NODE_H, AGG_H = 28.0, 14.0, 3.0, 22.0, 24.0
COLUMN_PX = 2.0
COLUMNS = int(PLOT_W / COLUMN_PX)
LABEL_CHARS = 30

STATE_CLASS = {
    "waiting": "s-waiting",
    "starting": "s-starting",
    "ready": "s-ready",
    "restarting": "s-restarting",
    "unresponsive": "s-restarting",  # ready but not answering: out of the rotation
    "stopping": "s-stopping",
    "failed": "s-failed",
}
STATE_WORD = {"starting": "loading (starting)", "ready": "ready"}
CATEGORY_OF = {"starting": "loading", "ready": "ready"}  # everything else: down
STACK = ("serving", "idle", "loading", "down")  # bottom to top in aggregate rows


def axis_for(report: Report) -> Axis:
    return Axis(report.span.start, report.span.end, LABEL_W, PLOT_W)


def timeline_svg(report: Report) -> str:
    axis = axis_for(report)
    body: list[str] = []
    y = TOP
    for group in report.groups:
        body.append(_node_header(group, y))
        y += NODE_H
        rows: Sequence[Row] = group.rows
        if report.aggregate and group.lanes:
            body.append(_aggregate_row(group, axis, y))
            y += AGG_H + GAP
            rows = group.others
        for row in rows:
            body.append(_instance_row(row, axis, y))
            y += ROW_H + GAP
    if not report.groups:
        body.append(
            f'<text class="note" x="{num(LABEL_W)}" y="{num(y + 14)}">no plan: '
            "the run ended before it placed any instance</text>"
        )
        y += 24
    height = y + 6
    grid = axis.draw(TOP, height - TOP - 6)
    lines = _run_lines(report, axis, TOP - 4, height - 6)
    return svg(WIDTH, height, grid + "".join(body) + lines, "timeline", "timeline by node")


def _node_header(group: NodeGroup, y: float) -> str:
    facts = [f"{len(group.lanes)} lane{'s' if len(group.lanes) != 1 else ''}"]
    if group.gpus:
        facts.append(f"GPUs {','.join(map(str, group.gpus))}")
    if group.address:
        facts.append(str(group.address))
    base = num(y + NODE_H - 7)
    return (
        f'<line class="sep" x1="0" x2="{num(WIDTH)}" y1="{num(y + 2)}" y2="{num(y + 2)}"/>'
        f'<text class="node" x="4" y="{base}">{esc(group.name)}'
        f'<tspan class="facts" dx="8">{esc(" · ".join(facts))}</tspan></text>'
    )


def _label(text: str, title: str, y: float, height: float) -> str:
    shown = text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"
    return (
        f'<text class="label" x="{num(LABEL_W - 8)}" y="{num(y + height - 3)}">'
        f"<title>{esc(title)}</title>{esc(shown)}</text>"
    )


def _instance_row(row: Row, axis: Axis, y: float) -> str:
    about = [row.instance, f"type {row.planned.type}"]
    if row.model:
        about.append(f"model {row.model}")
    if row.gpus:
        about.append(f"GPUs {','.join(map(str, row.planned.gpus))}")
    if row.planned.port:
        about.append(f"port {row.planned.port}")
    about.append(f"restarts {row.life.restarts}")
    parts = [_label(row.instance, " · ".join(about), y, ROW_H)]
    for seg in row.life.segments:
        cls = STATE_CLASS.get(seg.state)
        if cls is None:
            continue  # inactive, exited: nothing runs
        x0, x1 = axis.x(seg.start), axis.x(seg.end)
        word = STATE_WORD.get(seg.state, seg.state)
        title = (
            f"{row.instance} · {word} {clock(seg.start)} → {clock(seg.end)} "
            f"({duration(seg.seconds)})" + (f" · {seg.reason}" if seg.reason else "")
        )
        parts.append(rect(x0, y, x1 - x0, ROW_H, cls, esc(title)))
    if row.samples is not None:
        parts.extend(_serving(row, row.samples, axis, y))
    parts.extend(_mark(row.instance, mark, axis, y) for mark in row.life.marks)
    return "".join(parts)


def spread(
    samples: LaneSamples, axis: Axis, columns: int = COLUMNS
) -> tuple[list[float], list[float]]:
    """Busy seconds and requests started per column."""
    width = axis.seconds / columns
    return samples.per_interval([axis.start + c * width for c in range(columns + 1)])


def _serving(row: Row, samples: LaneSamples, axis: Axis, y: float) -> Iterable[str]:
    busy, started = spread(samples, axis)
    width = axis.seconds / COLUMNS
    levels = [2 if b >= 0.5 * width else 1 if b >= 0.02 * width else 0 for b in busy]
    for first, last, level in _runs(levels):
        if not level:
            continue
        t0, t1 = axis.start + first * width, axis.start + (last + 1) * width
        share = sum(busy[first : last + 1]) / max(t1 - t0, 1e-9)
        n = round(sum(started[first : last + 1]))
        title = (
            f"{row.instance} · serving {clock(t0)} → {clock(t1)} ({duration(t1 - t0)}): "
            f"a request outstanding {share:.0%} of the time, {n:,} started"
        )
        cls = "s-serving" if level == 2 else "s-partly"
        yield rect(axis.x(t0), y, axis.x(t1) - axis.x(t0), ROW_H, cls, esc(title))


def _runs(values: Sequence[object]) -> Iterable[tuple[int, int, object]]:
    """``(first, last, value)`` of each run of equal consecutive values."""
    first = 0
    for i in range(1, len(values) + 1):
        if i == len(values) or values[i] != values[first]:
            yield first, i - 1, values[first]
            first = i


def _mark(instance: str, mark: Mark, axis: Axis, y: float) -> str:
    x = axis.x(mark.time)
    words = {MarkKind.RESTART: "restart", MarkKind.EXIT: "exit", MarkKind.FAILED: "failed"}
    title = esc(f"{instance} · {words[mark.kind]} at {clock(mark.time)}: {mark.text}")
    if mark.kind is MarkKind.RESTART:
        path = f"M{num(x - 4)} {num(y)}L{num(x + 4)} {num(y)}L{num(x)} {num(y + 7)}Z"
        return f'<path class="m-restart" d="{path}"><title>{title}</title></path>'
    if mark.kind is MarkKind.FAILED:
        mid = y + ROW_H / 2
        path = f"M{num(x)} {num(mid - 5)}L{num(x + 5)} {num(mid)}L{num(x)} {num(mid + 5)}L{num(x - 5)} {num(mid)}Z"
        return f'<path class="m-failed" d="{path}"><title>{title}</title></path>'
    return rect(x - 1, y - 1, 2, ROW_H + 2, "m-exit ok" if mark.ok else "m-exit", title)


def _aggregate_row(group: NodeGroup, axis: Axis, y: float) -> str:
    """A node's lanes as one row: per column, the share of their GPU time per category.

    Columns whose stacks differ by less than ``AGG_TOLERANCE`` from the first of a run
    are drawn as one block (with the run's mean): load that wobbles by a pixel is one
    block, not hundreds of slivers, which keeps a 1,024-lane page small.
    """
    shares = _node_columns(group.lanes, axis)
    width = axis.seconds / COLUMNS
    gpus = sum(max(r.gpus, 1) for r in group.lanes)
    label = f"{len(group.lanes)} lanes, {gpus} GPUs"
    parts = [_label(label, f"{group.name}: {label} (stacked: share of their GPU time)", y, AGG_H)]
    for first, last in _similar_runs(shares):
        t0, t1 = axis.start + first * width, axis.start + (last + 1) * width
        count = last - first + 1
        mean = [sum(col[c] for col in shares[first : last + 1]) / count for c in STACK]
        words = ", ".join(f"{c} {m:.0%}" for c, m in zip(STACK, mean, strict=True))
        blocks, bottom = [], y + AGG_H
        x0, x1 = axis.x(t0), axis.x(t1)
        for category, h in zip(STACK, _apportion(mean, AGG_H), strict=True):
            if h > 0:
                bottom -= h
                blocks.append(rect(x0, bottom, x1 - x0, h, f"c-{category}"))
        title = esc(f"{group.name} {clock(t0)} → {clock(t1)}: {words}")
        parts.append(f"<g><title>{title}</title>{''.join(blocks)}</g>")
    parts.extend(_aggregate_marks(group, axis, y))
    return "".join(parts)


AGG_TOLERANCE = 0.08  # share of the row (2 px of 24) per category


def _similar_runs(columns: Sequence[dict[str, float]]) -> Iterable[tuple[int, int]]:
    first = 0
    for i in range(1, len(columns) + 1):
        if i == len(columns) or any(
            abs(columns[i][c] - columns[first][c]) > AGG_TOLERANCE for c in STACK
        ):
            yield first, i - 1
            first = i


def _node_columns(rows: Sequence[Row], axis: Axis) -> list[dict[str, float]]:
    """Per column, each category's share of the rows' GPU time (difference arrays)."""
    width = axis.seconds / COLUMNS
    sums = {c: [0.0] * (COLUMNS + 1) for c in ("loading", "ready", "down")}
    serving = [0.0] * COLUMNS
    for row in rows:
        weight = max(row.gpus, 1)
        for seg in row.life.segments:
            _add_span(sums[CATEGORY_OF.get(seg.state, "down")], seg.start, seg.end, weight, axis)
        if row.samples is not None:
            busy, _ = spread(row.samples, axis)
            for c, b in enumerate(busy):
                serving[c] += b * weight
    total = sum(max(r.gpus, 1) for r in rows) * width
    columns = []
    running = dict.fromkeys(sums, 0.0)
    for c in range(COLUMNS):
        for category, diff in sums.items():
            running[category] += diff[c]
        ready = max(0.0, running["ready"])
        serve = min(serving[c], ready)
        col = {
            "serving": serve,
            "idle": ready - serve,
            "loading": max(0.0, running["loading"]),
            "down": max(0.0, running["down"]),
        }
        columns.append({k: v / total for k, v in col.items()})
    return columns


def _add_span(diff: list[float], start: float, end: float, weight: float, axis: Axis) -> None:
    """Add ``weight`` GPU-seconds per second over ``[start, end)`` to per-column sums.

    ``diff`` is a difference array of per-column rates: full columns get the whole column
    width, the partial first and last ones their overlap (as one-column bumps).
    """
    width = axis.seconds / COLUMNS
    s = (max(start, axis.start) - axis.start) / width
    e = (min(end, axis.end) - axis.start) / width
    if e <= s:
        return
    first, last = int(s), min(math.ceil(e) - 1, COLUMNS - 1)
    if first >= COLUMNS:
        return
    if first == last:
        _bump(diff, first, (e - s) * width * weight)
        return
    _bump(diff, first, (first + 1 - s) * width * weight)
    diff[first + 1] += width * weight
    diff[last] -= width * weight
    _bump(diff, last, (e - last) * width * weight)


def _bump(diff: list[float], column: int, value: float) -> None:
    diff[column] += value
    diff[column + 1] -= value


def _apportion(values: Sequence[float], units: float) -> list[int]:
    """``values`` (shares adding to about 1) as whole pixels adding up to ``units``."""
    total = sum(values)
    if total <= 0:
        return [0] * len(values)
    exact = [v / total * units for v in values]
    whole = [int(x) for x in exact]
    largest_remainders = sorted(range(len(exact)), key=lambda i: whole[i] - exact[i])
    for i in largest_remainders[: int(units) - sum(whole)]:
        whole[i] += 1
    return whole


def _aggregate_marks(group: NodeGroup, axis: Axis, y: float) -> Iterable[str]:
    """One ▼ per column with restarts (and a red bar per column with exits), counted."""
    width = axis.seconds / COLUMNS
    by_column: dict[tuple[int, MarkKind], list[str]] = {}
    for row in group.lanes:
        for mark in row.life.marks:
            column = min(COLUMNS - 1, int((mark.time - axis.start) / width))
            kind: MarkKind = MarkKind.EXIT if mark.kind is MarkKind.FAILED else mark.kind
            by_column.setdefault((column, kind), []).append(f"{row.instance}: {mark.text}")
    for (column, kind), texts in sorted(by_column.items(), key=lambda item: item[0][0]):
        t = axis.start + (column + 0.5) * width
        word = "restart" if kind is MarkKind.RESTART else "exit"
        shown = "; ".join(texts[:5]) + (f"; +{len(texts) - 5} more" if len(texts) > 5 else "")
        text = f"{len(texts)} {word}{'s' if len(texts) != 1 else ''}: {shown}"
        yield _mark(group.name, Mark(t, kind, text), axis, y)


def _run_lines(report: Report, axis: Axis, top: float, bottom: float) -> str:
    """Vertical lines across every row: first request, last request's end, stop."""
    span, series = report.span, report.files.series
    lines = []
    first, last = series.first_request, series.last_request_end
    if first is not None:
        after = elapsed(first - span.start)
        lines.append((first, "v-request", f"first request at {clock(first)} ({after} in)"))
    if last is not None:
        before = elapsed(span.end - last)
        lines.append((last, "v-request", f"last request ended at {clock(last)} ({before} left)"))
    if span.stopping_at is not None:
        lines.append((span.stopping_at, "v-stop", f"stop began at {clock(span.stopping_at)}"))
    out = []
    for t, cls, text in lines:
        x = num(axis.x(t))
        out.append(
            f'<line class="{cls}" x1="{x}" x2="{x}" y1="{num(top)}" y2="{num(bottom)}"/>'
            f'<line class="hover" x1="{x}" x2="{x}" y1="{num(top)}" y2="{num(bottom)}">'
            f"<title>{esc(text)}</title></line>"
        )
    return "".join(out)
