"""The report's HTML sections around the charts: outcome, efficiency, plan, notes.

Tables longer than ``FOLD_ROWS`` sit in a ``<details>`` element, folded (HTML opens
it without any script), so the page of a 1,024-lane run still starts with the picture.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ddsup.ops.report._report_data import Report, Row
from ddsup.ops.report._svg import duration, esc, num, stamp, svg
from ddsup.record import (
    CATEGORIES,
    MEANINGS,
    EventLine,
    GpuTime,
    LaneTime,
    gpu_time_text,
    whole_percents,
)

FOLD_ROWS = 32
BAR_W = 1126.0
SHARE_CLASSES = (*CATEGORIES, "unused")


def outcome_section(report: Report) -> str:
    files, span = report.files, report.span
    run = files.run
    result = files.result or files.finished
    if result:
        cause = result["cause"]
        status = result["status"]
        kind = "ok" if status == "ok" else "bad"
        who = f"{cause['unit']}: " if cause.get("unit") else ""
        headline = f"{status}, exit {result['exit_code']} ({who}{cause['reason']})"
        end = ("ended", stamp(span.end))
    else:
        kind, headline = "live", "no result yet: live (or its controller was killed)"
        end = ("shown up to", f"now, {stamp(report.now)}")
    facts = [
        ("started", stamp(span.start)),
        end,
        ("ran", duration(span.seconds)),
        ("launcher", run.launcher or "?"),
        ("unit directory", run.unit_dir or "?"),
        ("state directory", str(files.path)),
    ]
    return (
        f"<header><h1>ddsup run <code>{esc(run.invocation_id or '?')}</code></h1>"
        f'<p class="outcome {kind}">{esc(headline)}</p>{_facts(facts)}</header>'
    )


def _facts(pairs: Iterable[tuple[str, object]]) -> str:
    items = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in pairs)
    return f'<dl class="facts">{items}</dl>'


def efficiency_section(report: Report) -> str:
    eff, totals = report.efficiency, report.totals
    nodes = len(report.groups)
    first = eff.first_request
    last = eff.last_request
    facts = [
        (
            "allocation",
            f"{eff.allocation_gpus} GPUs on {nodes} node{'s' if nodes != 1 else ''}"
            f" × {duration(eff.span.seconds)} = {gpu_time_text(eff.allocation_seconds)} of GPU time",
        ),
        (
            "start → first request",
            duration(first - eff.span.start) if first is not None else "no request",
        ),
        ("last request → end", duration(eff.span.end - last) if last is not None else "no request"),
        (
            "requests",
            f"{totals.answered:,} answered, {totals.refused_429:,} refused with 429, "
            f"{_count(totals.refused_other, 'other refusal')}, "
            f"{_count(totals.failed, 'failed lane attempt')}, "
            f"{totals.cut:,} cut short by the client or a stop",
        ),
        ("prefix cache", _prefix_cache(totals.cache_queries, totals.cache_hits)),
        ("restarts", f"{sum(lane.restarts for lane in eff.lanes):,}"),
    ]
    return (
        '<section id="efficiency"><h2>Where the GPU time went</h2>'
        f'<p class="line">{esc(eff.line())}</p>{_share_bar(report)}{_key(report)}'
        f"{_facts(facts)}</section>"
    )


def _key(report: Report) -> str:
    """What each part of the bar and the line is (the allocation's GPU time, split)."""
    eff = report.efficiency
    parts = [*CATEGORIES] if eff.has_series else ["loading", "ready", "down"]
    if eff.unused > 0:
        parts.append("unused")
    items = "".join(f"<dt>{esc(p)}</dt><dd>{esc(MEANINGS[p])}</dd>" for p in parts)
    return f'<dl class="facts key">{items}</dl>'


def tables_section(report: Report) -> str:
    """The efficiency table per node and per lane (GPU time per category, and shares)."""
    lanes = len(report.efficiency.lanes)
    parts = ['<section id="tables"><h2>GPU time by node and by lane</h2>']
    if len(report.groups) > 1:
        nodes = len(report.groups)
        parts.append(_fold(f"By node ({nodes})", _node_table(report), nodes))
    parts.append(_fold(f"By lane ({lanes})", _lane_table(report), lanes))
    parts.append("</section>")
    return "".join(parts)


def _prefix_cache(queries: int, hits: int) -> str:
    """The lanes' prefix-cache hit rate over the run, by their own counters."""
    if not queries:
        return "no counters read from the lanes"
    return (
        f"{hits / queries:.0%} of {queries:,} prompt tokens found in the lanes' caches "
        f"({queries - hits:,} computed)"
    )


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _share_bar(report: Report) -> str:
    eff = report.efficiency
    shares = eff.shares()
    seconds = {**{c: getattr(eff.total, c) for c in CATEGORIES}, "unused": eff.unused}
    percents = dict(zip(shares, whole_percents(list(shares.values())), strict=True))
    x, parts = 0.0, []
    for category in SHARE_CLASSES:
        w = shares[category] * BAR_W
        if w <= 0:
            continue
        title = (
            f"{category}: {gpu_time_text(seconds[category])} of GPU time ({percents[category]} %)"
        )
        parts.append(
            f'<rect class="c-{category}" x="{num(x)}" y="0" width="{num(w)}" height="26">'
            f"<title>{esc(title)}</title></rect>"
        )
        if w > 80:
            parts.append(
                f'<text class="in-bar" x="{num(x + 6)}" y="17">{category} {percents[category]} %</text>'
            )
        x += w
    return svg(BAR_W, 26, "".join(parts), "share", "share of the allocation's GPU time")


def _mini_bar(time: GpuTime) -> str:
    total = time.total
    x, parts = 0.0, []
    for category in CATEGORIES:
        w = getattr(time, category) / total * 120 if total > 0 else 0.0
        if w > 0:
            parts.append(
                f'<rect class="c-{category}" x="{num(x)}" y="0" width="{num(w)}" height="10"/>'
            )
            x += w
    return svg(120, 10, "".join(parts), "mini", "split")


def _cells(time: GpuTime) -> str:
    total = time.total
    out = []
    for category in CATEGORIES:
        value = getattr(time, category)
        share = f"{value / total:.0%}" if total > 0 else "–"
        out.append(f'<td class="num">{duration(value)} <small>{share}</small></td>')
    return "".join(out)


def _lane_table(report: Report) -> str:
    models = {r.instance: r.model for g in report.groups for r in g.lanes}
    head = (
        "<tr><th>lane</th><th>model</th><th>node</th><th>GPUs</th>"
        + "".join(f"<th>{c}</th>" for c in CATEGORIES)
        + "<th>restarts</th><th>split</th></tr>"
    )
    rows = [head]
    for lane in report.efficiency.lanes:
        rows.append(
            f"<tr><td>{esc(lane.instance)}</td><td>{esc(models.get(lane.instance) or '')}</td>"
            f"<td>{esc(lane.node)}</td><td class='num'>{lane.gpus}</td>{_cells(lane.gpu_time)}"
            f"<td class='num'>{lane.restarts}</td><td>{_mini_bar(lane.time)}</td></tr>"
        )
    if not report.efficiency.lanes:
        rows.append('<tr><td colspan="10">no lanes in the plan</td></tr>')
    return f'<table class="lanes">{"".join(rows)}</table>'


def _node_table(report: Report) -> str:
    by_node: dict[str, list[LaneTime]] = {}
    for lane in report.efficiency.lanes:
        by_node.setdefault(lane.node, []).append(lane)
    head = (
        "<tr><th>node</th><th>lanes</th><th>GPUs</th>"
        + "".join(f"<th>{c}</th>" for c in CATEGORIES)
        + "<th>restarts</th><th>split</th></tr>"
    )
    rows = [head]
    for group in report.groups:
        lanes = by_node.get(group.name, [])
        total = GpuTime()
        for lane in lanes:
            total += lane.gpu_time
        rows.append(
            f"<tr><td>{esc(group.name)}</td><td class='num'>{len(lanes)}</td>"
            f"<td class='num'>{sum(lane.gpus for lane in lanes)}</td>{_cells(total)}"
            f"<td class='num'>{sum(lane.restarts for lane in lanes)}</td><td>{_mini_bar(total)}</td></tr>"
        )
    return f'<table class="nodes">{"".join(rows)}</table>'


def plan_section(report: Report) -> str:
    if not report.groups:
        return '<section id="plan"><h2>Plan</h2><p>No plan: the run ended before placing anything.</p></section>'
    node_rows = ["<tr><th>node</th><th>address</th><th>GPUs</th><th>instances</th></tr>"]
    for group in report.groups:
        node_rows.append(
            f"<tr><td>{esc(group.name)}</td><td>{esc(group.address or '')}</td>"
            f"<td>{esc(','.join(map(str, group.gpus)))}</td><td class='num'>{len(group.rows)}</td></tr>"
        )
    rows = [r for g in report.groups for r in g.rows]
    return (
        '<section id="plan"><h2>Plan</h2>'
        f'<table class="plan-nodes">{"".join(node_rows)}</table>'
        f"{_fold(f'Instances ({len(rows)})', _instance_table(report, rows), len(rows))}</section>"
    )


def _instance_table(report: Report, rows: list[Row]) -> str:
    exits = _last_exits(report.files.events)
    head = (
        "<tr><th>instance</th><th>type</th><th>model</th><th>node</th><th>GPUs</th><th>port</th>"
        "<th>replica</th><th>rank</th><th>restarts</th><th>last state</th><th>last exit</th></tr>"
    )
    out = [head]
    for row in rows:
        p = row.planned
        last = row.life.segments[-1] if row.life.segments else None
        state = (
            f"{last.state} ({last.reason})"
            if last and last.reason
            else (last.state if last else "")
        )
        cells = (
            row.instance,
            p.type,
            row.model or "",
            p.node,
            ",".join(map(str, p.gpus)),
            _blank(p.port),
            _blank(p.replica),
            _blank(p.rank),
            row.life.restarts,
            state,
            exits.get(row.instance, ""),
        )
        out.append("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in cells) + "</tr>")
    return f'<table class="instances">{"".join(out)}</table>'


def _blank(value: object) -> object:
    return "" if value is None else value


def _last_exits(events: Sequence[EventLine]) -> dict[str, str]:
    exits: dict[str, str] = {}
    for event in events:
        if event["event"] != "unit" and event["event"] != "exit":
            continue
        exit_json = event.get("exit")
        if not event["instance"] or exit_json is None:
            continue
        if "code" in exit_json:
            exits[event["instance"]] = f"code {exit_json['code']}"
        elif "signal" in exit_json:
            exits[event["instance"]] = exit_json["signal"]
    return exits


def _fold(summary: str, body: str, rows: int) -> str:
    opened = "" if rows > FOLD_ROWS else " open"
    return f"<details{opened}><summary>{esc(summary)}</summary>{body}</details>"


def notes_section(report: Report) -> str:
    notes = list(report.files.problems)
    if report.files.series.files == 0:
        notes.append(
            "No endpoint time series (series/endpoint-*.jsonl): the run had no endpoint, it "
            "never started, or ddsup predates it. Serving and idle are then unknown."
        )
    if not notes:
        return ""
    items = "".join(f"<li>{esc(n)}</li>" for n in notes[:50])
    more = f"<li>… and {len(notes) - 50} more</li>" if len(notes) > 50 else ""
    return f'<section id="notes"><h2>Notes</h2><ul>{items}{more}</ul></section>'
