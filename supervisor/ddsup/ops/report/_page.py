"""The report page: one self-contained HTML file (inline CSS and SVG, no script, no network).

A Content-Security-Policy in the page forbids scripts and every fetch outright, so even
a string that escaped :func:`esc` could not run or call out: the file is safe to open
from any run, and reads the same offline, in a mail attachment, or years later.
"""

from __future__ import annotations

from ddsup import __version__
from ddsup.ops.report._rate_svg import rate_svg
from ddsup.ops.report._report_data import Report
from ddsup.ops.report._sections import (
    efficiency_section,
    notes_section,
    outcome_section,
    plan_section,
    tables_section,
)
from ddsup.ops.report._svg import esc, stamp
from ddsup.ops.report._timeline_svg import timeline_svg

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"

CSS = """
:root { --loading:#e69f00; --ready:#a6cfee; --serving:#0b5fa5; --down:#c4c4c4;
  --restarting:#cc79a7; --stopping:#8d8d8d; --waiting:#e6e6e6; --failed:#f3c2b8;
  --bad:#b3261e; --ink:#1f2328; --muted:#656d76; --rule:#d8dee4; }
* { box-sizing: border-box; }
body { margin: 0; padding: 20px 24px 40px; color: var(--ink); background: #fff;
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; }
main { max-width: 1140px; }
h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 26px 0 8px; }
h3 { font-size: 14px; margin: 16px 0 6px; }
code { font: 13px ui-monospace, "DejaVu Sans Mono", monospace; }
.outcome { font-size: 16px; font-weight: 600; margin: 4px 0 10px; padding: 6px 10px;
  border-left: 5px solid #2e7d32; background: #eef7ef; }
.outcome.bad { border-color: var(--bad); background: #fbeeed; }
.outcome.live { border-color: var(--serving); background: #edf4fb; }
.facts { display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px; margin: 0; }
.facts dt { color: var(--muted); } .facts dd { margin: 0; overflow-wrap: anywhere; }
.line { font-size: 18px; font-weight: 600; margin: 4px 0 8px; }
table { border-collapse: collapse; margin: 6px 0; font-size: 13px; }
th, td { border-bottom: 1px solid var(--rule); padding: 3px 10px 3px 0; text-align: left;
  vertical-align: middle; }
th { color: var(--muted); font-weight: 600; } td.num { text-align: right; }
td small { color: var(--muted); }
details summary { cursor: pointer; font-weight: 600; margin: 10px 0 4px; }
svg { display: block; overflow: visible; }
svg text { font: 11px system-ui, "DejaVu Sans", sans-serif; fill: var(--ink); }
svg .tick { text-anchor: middle; fill: var(--muted); }
svg .label { text-anchor: end; }
svg .node { font-weight: 700; font-size: 12px; } svg .facts { font-weight: 400; fill: var(--muted); }
svg .note { fill: var(--muted); font-style: italic; }
svg .in-bar { fill: #fff; font-weight: 600; }
.grid { stroke: #eceff1; } .sep { stroke: var(--rule); }
.s-waiting { fill: var(--waiting); } .s-starting, .c-loading { fill: var(--loading); }
.s-ready, .c-idle { fill: var(--ready); } .s-serving, .c-serving { fill: var(--serving); }
.s-partly { fill: var(--serving); opacity: .45; } .s-restarting { fill: var(--restarting); }
.s-stopping { fill: var(--stopping); } .s-failed { fill: var(--failed); }
.c-down { fill: var(--down); } .c-unused { fill: #f4f4f4; stroke: var(--rule); }
.m-restart { fill: #d55e00; } .m-exit, .m-failed { fill: var(--bad); } .m-exit.ok { fill: #57606a; }
.r-answered { fill: var(--serving); } .r-429 { fill: var(--loading); } .r-errors { fill: var(--bad); }
.r-cut { fill: var(--stopping); }
.v-request { stroke: var(--serving); stroke-dasharray: 3 3; }
.v-stop { stroke: var(--ink); stroke-dasharray: 6 3; }
.hover { stroke: transparent; stroke-width: 7; }
.legend { list-style: none; display: flex; flex-wrap: wrap; gap: 4px 16px; padding: 0;
  margin: 4px 0 8px; font-size: 12px; }
.legend li { display: flex; align-items: center; gap: 5px; } .legend svg { display: inline; }
footer { margin-top: 28px; color: var(--muted); font-size: 12px; }
@media print { body { padding: 0; } details { display: block; } }
"""

LEGEND = (
    ("rect", "s-waiting", "waiting"),
    ("rect", "s-starting", "loading"),
    ("rect", "s-ready", "ready, idle"),
    ("rect", "s-serving", "serving"),
    ("rect", "s-partly", "partly serving"),
    ("rect", "s-restarting", "restarting"),
    ("rect", "s-stopping", "stopping"),
    ("rect", "s-failed", "failed"),
    ("restart", "m-restart", "restart"),
    ("rect", "m-exit", "exit (grey: status 0)"),
    ("line", "v-request", "first / last request"),
    ("line", "v-stop", "stop"),
)


RATE_LEGEND = (
    ("rect", "r-answered", "answered"),
    ("rect", "r-429", "refused with 429"),
    ("rect", "r-cut", "cut short by the client or a stop"),
    ("rect", "r-errors", "errors (refusals, failed lane attempts)"),
)


def legend(kinds: tuple[tuple[str, str, str], ...] = LEGEND) -> str:
    """The key to a chart's colours and marks, as a wrapping HTML list."""
    items = []
    for shape, cls, word in kinds:
        if shape == "rect":
            w = 4 if cls.startswith("m-") else 14
            mark = f'<rect class="{cls}" x="{(14 - w) // 2}" y="1" width="{w}" height="12"/>'
        elif shape == "restart":
            mark = f'<path class="{cls}" d="M2 2L12 2L7 10Z"/>'
        else:
            mark = f'<line class="{cls}" x1="7" x2="7" y1="0" y2="14"/>'
        items.append(f'<li><svg width="14" height="14">{mark}</svg>{esc(word)}</li>')
    return f'<ul class="legend">{"".join(items)}</ul>'


def render_report(report: Report) -> str:
    """The whole page as one string."""
    run_id = esc(report.files.run.invocation_id or "?")
    rows = "one row per node's lanes" if report.aggregate else "one row per instance"
    body = [
        outcome_section(report),
        efficiency_section(report),
        f'<section id="timeline"><h2>Timeline</h2><p class="hint">Grouped by node, {rows}; '
        "hover over any bar or mark for times and reasons.</p>",
        legend(),
        timeline_svg(report),
        "</section>",
        '<section id="requests"><h2>Requests per second through the endpoint</h2>',
        legend(RATE_LEGEND),
        rate_svg(report),
        "</section>",
        tables_section(report),
        plan_section(report),
        notes_section(report),
        f"<footer>ddsup {esc(__version__)} · report written {esc(stamp(report.now))} · "
        f"from {esc(report.files.path)}</footer>",
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>ddsup run {run_id}</title><style>{CSS}</style></head>"
        f"<body><main>{''.join(body)}</main></body></html>\n"
    )
