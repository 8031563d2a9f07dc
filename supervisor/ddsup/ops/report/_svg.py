"""The small vocabulary the report draws with: escaping, the time axis, SVG shapes.

Every string that comes from a run (instance and node names, reasons, paths) reaches
the page through :func:`esc`, in text and in attributes alike: a reason such as
``<script>`` is shown, never run. Numbers are written with one decimal, which keeps the
file small without visible loss at the report's pixel sizes.
"""

from __future__ import annotations

import html
import math
import re
import time
from dataclasses import dataclass

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def esc(value: object) -> str:
    """``value`` as HTML/SVG text or attribute content: escaped, control characters replaced."""
    return html.escape(_CONTROL.sub("\ufffd", str(value)), quote=True)


def num(value: float) -> str:
    """A coordinate: one decimal, no trailing ``.0``."""
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


def elapsed(seconds: float) -> str:
    """``0s``, ``45s``, ``3m``, ``3m20s``, ``2h``, ``2h05m``: time since the run began."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        minutes, rest = divmod(seconds, 60)
        return f"{minutes}m{rest:02d}s" if rest else f"{minutes}m"
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if rest // 60 else f"{hours}h"


def duration(seconds: float) -> str:
    """A duration for tables and hover text: ``0.4 s``, ``12 s``, ``3m20s``, ``2h05m``."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    return elapsed(seconds)


def clock(unix: float) -> str:
    """Local wall-clock time of day, ``14:02:16``."""
    return time.strftime("%H:%M:%S", time.localtime(unix))


def stamp(unix: float) -> str:
    """Local date and time with the zone, ``2026-12-02 14:02:16 CET``."""
    return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(unix))


_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200)


@dataclass(frozen=True)
class Axis:
    """Time ``start … end`` onto pixels ``left … left + width`` (every chart shares one)."""

    start: float
    end: float
    left: float
    width: float

    @property
    def seconds(self) -> float:
        return max(self.end - self.start, 1e-9)

    def x(self, t: float) -> float:
        clipped = min(max(t, self.start), self.end)
        return self.left + (clipped - self.start) / self.seconds * self.width

    def ticks(self, most: int = 10) -> list[float]:
        """Tick times at a round step (1 s … 12 h) with at most ``most`` ticks."""
        step = next((s for s in _STEPS if self.seconds / s <= most), None)
        if step is None:
            step = 86400 * math.ceil(self.seconds / most / 86400)
        count = int(self.seconds // step)
        return [self.start + i * step for i in range(count + 1)]

    def draw(self, top: float, height: float) -> str:
        """Tick labels (elapsed time) above ``top``, and grid lines down ``height`` px."""
        parts = []
        for t in self.ticks():
            x = num(self.x(t))
            label = elapsed(t - self.start)
            parts.append(
                f'<line class="grid" x1="{x}" x2="{x}" y1="{num(top)}" y2="{num(top + height)}"/>'
                f'<text class="tick" x="{x}" y="{num(top - 6)}">{label}</text>'
            )
        return "".join(parts)


def rect(x: float, y: float, w: float, h: float, cls: str, title: str = "") -> str:
    """A rectangle of class ``cls``; ``title`` (already escaped) becomes its hover text."""
    shape = f'<rect class="{cls}" x="{num(x)}" y="{num(y)}" width="{num(max(w, 0.5))}" height="{num(h)}"'
    return f"{shape}><title>{title}</title></rect>" if title else f"{shape}/>"


def svg(width: float, height: float, body: str, cls: str, label: str) -> str:
    """An inline SVG element; ``label`` (escaped) names it for screen readers."""
    return (
        f'<svg class="{cls}" role="img" aria-label="{label}" width="{num(width)}" '
        f'height="{num(height)}" viewBox="0 0 {num(width)} {num(height)}">{body}</svg>'
    )
