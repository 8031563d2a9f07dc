"""One lane's time series as columns, and the two questions asked of it.

How busy was the lane between two times (the timeline's pixels), and how busy while it
was ready (the efficiency table's serving)? A day of a thousand lanes holds tens of
millions of samples, so both are answered with prefix sums and binary search over the
columns, in time logarithmic in the samples, whenever the samples do not overlap (one
endpoint process at a time: the normal case). Overlapping samples (several endpoint
processes at once) take the plain pass over every sample.
"""

from __future__ import annotations

import functools
import itertools
import operator
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import accumulate


@dataclass(frozen=True)
class LaneSamples:
    """Parallel columns, one entry per series line that named the lane, ordered by start.

    Within a line, ``busy`` seconds and ``started`` requests are taken as spread evenly
    over ``[start, end]``: the line says how much, not when.
    """

    starts: list[float] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)
    busy: list[float] = field(default_factory=list)
    started: list[float] = field(default_factory=list)

    @functools.cached_property
    def disjoint(self) -> bool:
        """Each line ends before the next starts (and none ends before it starts)."""
        s, e = self.starts, self.ends
        return all(map(operator.le, e[:-1], s[1:])) and all(map(operator.le, s, e))

    @functools.cached_property
    def _prefix(self) -> tuple[list[float], list[float]]:
        return [0.0, *accumulate(self.busy)], [0.0, *accumulate(self.started)]

    def per_interval(self, edges: Sequence[float]) -> tuple[list[float], list[float]]:
        """Busy seconds and requests started within each ``[edges[i], edges[i + 1])``."""
        if self.disjoint:
            cumulative = [self._up_to(t) for t in edges]
            pairs = list(itertools.pairwise(cumulative))
            return [b1 - b0 for (b0, _), (b1, _) in pairs], [n1 - n0 for (_, n0), (_, n1) in pairs]
        busy, started = [0.0] * (len(edges) - 1), [0.0] * (len(edges) - 1)
        for s, e, b, n in zip(self.starts, self.ends, self.busy, self.started, strict=True):
            first = max(0, bisect_right(edges, s) - 1)
            for i in range(first, len(busy)):
                if edges[i] > e:
                    break
                share = _share(s, e, edges[i], edges[i + 1])
                busy[i] += b * share
                started[i] += n * share
        return busy, started

    def _up_to(self, t: float) -> tuple[float, float]:
        k = bisect_right(self.starts, t) - 1
        busy, started = self._prefix
        if k < 0:
            return 0.0, 0.0
        s, e = self.starts[k], self.ends[k]
        if t >= e:
            return busy[k + 1], started[k + 1]
        fraction = (t - s) / (e - s)
        return busy[k] + self.busy[k] * fraction, started[k] + self.started[k] * fraction

    def busy_within(self, spans: Sequence[tuple[float, float]]) -> float:
        """Busy seconds inside ``spans`` (sorted, disjoint).

        A line that lies partly inside a span counts at most the part inside: a lane is
        only busy while it is ready, so its busy seconds of that line fell there.
        """
        if not self.disjoint:
            return sum(
                min(b, sum(_overlap(s, e, a, z) for a, z in spans))
                for s, e, b in zip(self.starts, self.ends, self.busy, strict=True)
                if b > 0
            )
        starts, ends, busy = self.starts, self.ends, self.busy
        prefix, count, total = self._prefix[0], len(starts), 0.0
        used: dict[int, float] = {}  # lines across span edges may meet several spans

        def edge(k: int, a: float, z: float) -> float:
            taken = min(busy[k] - used.get(k, 0.0), _overlap(starts[k], ends[k], a, z))
            used[k] = used.get(k, 0.0) + taken
            return taken

        for a, z in spans:
            inside_from = bisect_left(starts, a)  # lines starting in the span …
            inside_to = bisect_right(ends, z)  # … and ending in it
            if inside_to > inside_from:
                total += prefix[inside_to] - prefix[inside_from]
            left = inside_from - 1
            if left >= 0 and ends[left] > a:  # a line across the span's start
                total += edge(left, a, z)
            right = inside_to
            if inside_from <= right < count and starts[right] < z:  # across its end
                total += edge(right, a, z)
        return total


def _overlap(s: float, e: float, a: float, z: float) -> float:
    return max(0.0, min(e, z) - max(s, a))


def _share(s: float, e: float, t0: float, t1: float) -> float:
    """The share of line ``[s, e]`` inside ``[t0, t1)`` (a zero-length line: 1 or 0)."""
    if e <= s:
        return 1.0 if t0 <= s < t1 else 0.0
    return _overlap(s, e, t0, t1) / (e - s)
