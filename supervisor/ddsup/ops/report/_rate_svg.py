"""Requests per second through the endpoint, stacked: answered, 429s, cut short, errors.

Attempts cut short by their client (it hung up) or by the endpoint's own stop are drawn
apart from errors, in grey: a clean ``ddsup stop`` cuts the requests in flight, and that
is nobody's fault.

Drawn on the timeline's time axis (same left edge and width), so a dip in requests lines
up with the lane that restarted above it. Each series line's counts are spread over its
span and summed into bins of at least the series interval and at least 4 pixels.
"""

from __future__ import annotations

import math

from ddsup.ops.report._report_data import Report
from ddsup.ops.report._svg import Axis, clock, esc, num, rect, svg
from ddsup.ops.report._timeline_svg import LABEL_W, PLOT_W, WIDTH, axis_for
from ddsup.record import FAILED, FINISHED, Series, SeriesLine

HEIGHT, TOP, BOTTOM = 150.0, 24.0, 8.0
KINDS = ("answered", "429", "cut", "errors")  # bottom to top


def rate_svg(report: Report) -> str:
    axis = axis_for(report)
    series = report.files.series
    bins, width = _bins(series, axis)
    rates = [{k: b[k] / width for k in KINDS} for b in bins]
    peak = max((sum(r.values()) for r in rates), default=0.0)
    top = _nice(peak)
    plot_h = HEIGHT - TOP - BOTTOM
    parts = [axis.draw(TOP, plot_h)]
    for fraction in (0.5, 1.0):
        y = TOP + plot_h * (1 - fraction)
        value = top * fraction
        parts.append(
            f'<line class="grid" x1="{num(LABEL_W)}" x2="{num(LABEL_W + PLOT_W)}" y1="{num(y)}" y2="{num(y)}"/>'
            f'<text class="label" x="{num(LABEL_W - 8)}" y="{num(y + 4)}">{_rate_text(value)}/s</text>'
        )
    step = PLOT_W / len(bins) if bins else PLOT_W
    for i, rate in enumerate(rates):
        total = sum(rate.values())
        if total <= 0:
            continue
        t0 = axis.start + i * width
        title = esc(
            f"{clock(t0)} → {clock(t0 + width)}: {rate['answered']:.1f}/s answered, "
            f"{rate['429']:.1f}/s refused with 429, {rate['cut']:.1f}/s cut short, "
            f"{rate['errors']:.1f}/s errors"
        )
        x = LABEL_W + i * step
        bottom = TOP + plot_h
        for kind in KINDS:
            h = rate[kind] / top * plot_h if top else 0.0
            if h <= 0:
                continue
            bottom -= h
            parts.append(rect(x, bottom, step, h, f"r-{kind}", title))
    if not series.lines:
        why = "no endpoint time series: no request went through the endpoint"
        if series.files == 0:
            why = "no endpoint time series in this state directory"
        parts.append(
            f'<text class="note" x="{num(LABEL_W + 8)}" y="{num(TOP + 30)}">{esc(why)}</text>'
        )
    parts.append(f'<text class="label" x="{num(LABEL_W - 8)}" y="{num(TOP + plot_h)}">0</text>')
    return svg(WIDTH, HEIGHT, "".join(parts), "rates", "requests per second")


def _bins(series: Series, axis: Axis) -> tuple[list[dict[str, float]], float]:
    """Counts per bin and the bin width in seconds."""
    count = max(1, min(int(PLOT_W / 4), math.ceil(axis.seconds / max(series.interval, 1e-3))))
    width = axis.seconds / count
    bins = [dict.fromkeys(KINDS, 0.0) for _ in range(count)]
    for line in series.lines:
        start = line.start if line.first is None else max(line.start, line.first)
        _spread(bins, width, axis, start, line.end, _counts(line))
    return bins, width


def _counts(line: SeriesLine) -> dict[str, float]:
    too_many = other = 0.0
    for by_status in line.refused.values():
        for status, n in by_status.items():
            if status == "429":
                too_many += n
            else:
                other += n
    return {
        "answered": line.total(FINISHED),
        "429": too_many,
        "cut": float(sum(line.cut.values())),
        "errors": line.total(FAILED) + other,
    }


def _spread(
    bins: list[dict[str, float]],
    width: float,
    axis: Axis,
    start: float,
    end: float,
    counts: dict[str, float],
) -> None:
    start, end = max(start, axis.start), min(end, axis.end)
    first = min(len(bins) - 1, max(0, int((start - axis.start) / width)))
    last = min(len(bins) - 1, max(0, int((end - axis.start) / width)))
    if end <= start or first == last:
        for kind, n in counts.items():
            bins[first][kind] += n
        return
    for b in range(first, last + 1):
        lo, hi = max(start, axis.start + b * width), min(end, axis.start + (b + 1) * width)
        share = max(0.0, hi - lo) / (end - start)
        for kind, n in counts.items():
            bins[b][kind] += n * share


def _nice(peak: float) -> float:
    """The smallest 1, 2, 5 × 10^k at or above ``peak`` (the chart's top)."""
    if peak <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(peak))
    return float(next(m * power for m in (1, 2, 5, 10) if m * power >= peak))


def _rate_text(value: float) -> str:
    if value >= 1000:
        return f"{value / 1000:.1f}k".replace(".0k", "k")
    return f"{value:.0f}" if value >= 10 or value == int(value) else f"{value:.1f}"
