"""The lanes' own prefix-cache counters, read from the ``/metrics`` the endpoint samples.

vLLM counts the prompt tokens it looked up in its prefix cache
(``vllm:prefix_cache_queries_total``) and those it found there
(``vllm:prefix_cache_hits_total``): their ratio is the share of prompt tokens a lane did
not have to compute, the figure prefix-aware routing (:mod:`._prefix_routing`) is
there to raise. The endpoint reads both whenever it samples a lane's queue, and adds up
each lane's increase: :class:`PrefixCacheTally` turns each lane's counters into what it
did since the endpoint first sampled it (a lane sampled for the first time counts from
zero: whatever it computed, it was sent through the endpoint). A counter that went down
means a new process (a restart at the same address): it counts again from zero.

An endpoint that restarts counts its lanes' past again; a lane with no such counters
(another server, an older vLLM) is left out.
"""

from __future__ import annotations

import math

from ddsup.endpoint._lanes import LaneInfo

QUERIES = b"vllm:prefix_cache_queries_total"
HITS = b"vllm:prefix_cache_hits_total"


def counter_sum(body: bytes, name: bytes) -> float | None:
    """The sum of every sample of metric ``name`` in Prometheus text, ``None`` without one.

    Only the lines that start with the name are looked at (found by ``bytes.find``):
    vLLM's ``/metrics`` is tens of kilobytes of histograms.
    """
    total, found, start = 0.0, False, 0
    while (at := body.find(name, start)) >= 0:
        start = at + len(name)
        if at and body[at - 1] != 0x0A:
            continue  # inside a line: a comment (# HELP, # TYPE) or another metric's name
        end = body.find(b"\n", start)
        rest = body[start:] if end < 0 else body[start:end]
        if rest[:1] not in (b"{", b" "):
            continue  # another metric whose name starts the same way
        value = rest.rsplit(b"}", 1)[-1].split()
        try:
            number = float(value[0]) if value else math.nan
        except ValueError:
            continue
        if math.isfinite(number) and number >= 0:
            total += number
            found = True
    return total if found else None


class PrefixCacheTally:
    """Prompt tokens each lane queried and hit in its prefix cache (see the module
    docstring): ``totals`` by lane instance, ``[queries, hits]``."""

    def __init__(self) -> None:
        self.totals: dict[str, list[float]] = {}
        self._last: dict[LaneInfo, tuple[float, float]] = {}  # each lane's counters last seen

    def sampled(self, lane: LaneInfo, body: bytes) -> tuple[float, float] | None:
        """What ``lane``'s counters in ``body`` add (queries, hits); ``None``: none there."""
        queries, hits = counter_sum(body, QUERIES), counter_sum(body, HITS)
        if queries is None or hits is None:
            return None
        last_queries, last_hits = self._last.get(lane, (0.0, 0.0))
        self._last[lane] = (queries, hits)
        if queries < last_queries or hits < last_hits:  # a new process: from zero
            last_queries = last_hits = 0.0
        added = (queries - last_queries, hits - last_hits)
        if added[0] or added[1]:
            self.add(lane.instance, *added)
        return added

    def add(self, lane: str, queries: float, hits: float) -> None:
        total = self.totals.get(lane)
        if total is None:
            self.totals[lane] = [queries, hits]
        else:
            total[0] += queries
            total[1] += hits

    def overall(self) -> tuple[float, float]:
        """Queries and hits over every lane."""
        return (
            sum(total[0] for total in self.totals.values()),
            sum(total[1] for total in self.totals.values()),
        )
