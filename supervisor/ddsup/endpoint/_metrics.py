"""The endpoint's own counters, rendered as Prometheus text on ``GET /metrics``.

A hand-rolled registry (dicts of label tuples) rather than prometheus_client: the hot
path adds to a dict entry, and the endpoint keeps no dependency beyond trio and httptools.

With several workers each counts its own requests; a scrape gathers every worker's
:meth:`Metrics.snapshot` through the parent and renders their sum
(:meth:`Metrics.add`), so one scrape gives the totals whichever worker answers it.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import TypedDict

from ddsup.endpoint._body_budget import BodyBudget
from ddsup.endpoint._lanes import LaneInfo, LaneTable
from ddsup.endpoint._prefix_cache import PrefixCacheTally
from ddsup.endpoint._timeseries import NO_SERIES, SeriesHooks  # [series hook]

Labelled = tuple[str, str, int]
"""Two labels (a model and a status, say) and their count."""
Counted = tuple[str, int]
"""One label and its count."""


class CountersJson(TypedDict):
    """Every counter of :class:`Metrics`, as :meth:`Metrics.snapshot` writes them and the
    workers' link carries them: each counter a list of rows, a row its labels then its
    count (a tuple here, a JSON array on the link, read back into tuples by the link's
    decoder). ``lane_cache``: (lane, queries, hits); ``histogram``: (model, the count in
    each bucket of :data:`BUCKETS` and over it, the seconds summed); ``waiting``: (model,
    requests waiting for a free slot now)."""

    requests: list[Labelled]
    retries: list[Counted]
    rejected: list[Labelled]
    upstream_errors: list[Labelled]
    metrics_errors: list[Counted]
    ejections: list[Counted]
    prefix_routed: list[Labelled]
    lane_cache: list[tuple[str, float, float]]
    histogram: list[tuple[str, list[int], float]]
    body_bytes: int
    waiting: list[Counted]


BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class Metrics:
    """Counters by label; per-lane gauges are read live from the lane table when rendered."""

    def __init__(self) -> None:
        self.requests: defaultdict[tuple[str, str], int] = defaultdict(int)
        self.retries: defaultdict[str, int] = defaultdict(int)
        self.rejected: defaultdict[tuple[str, str], int] = defaultdict(int)
        self.upstream_errors: defaultdict[tuple[str, str], int] = defaultdict(int)
        self.metrics_errors: defaultdict[str, int] = defaultdict(int)
        self.ejections: defaultdict[str, int] = defaultdict(int)  # by lane (see ._ejection)
        self.prefix_routed: defaultdict[tuple[str, str], int] = defaultdict(int)  # model, how
        self.lane_cache = PrefixCacheTally()  # the lanes' own counters, where sampled
        self.bodies: BodyBudget | None = None  # this process's, read when rendered
        self.body_bytes = 0  # other workers' (a gathered total)
        # this process's requests waiting for a free slot, by model (._lane_slots), read
        # when rendered; and other workers' (a gathered total)
        self.waiting_now: Callable[[], list[Counted]] = list
        self.waiting: defaultdict[str, int] = defaultdict(int)
        self._hist: dict[str, list[int]] = {}
        self._sum: defaultdict[str, float] = defaultdict(float)
        self.series: SeriesHooks = NO_SERIES  # [series hook] the same counts, over time

    def observe(self, model: str, status: int, seconds: float) -> None:
        """One finished request: its final status and its duration."""
        self.requests[(model, str(status))] += 1
        counts = self._hist.get(model)
        if counts is None:
            counts = self._hist[model] = [0] * (len(BUCKETS) + 1)
        counts[bisect_left(BUCKETS, seconds)] += 1
        self._sum[model] += seconds

    def cache_sampled(self, lane: LaneInfo, body: bytes) -> None:
        """A sample of ``lane``'s ``/metrics``: what its prefix-cache counters added."""
        added = self.lane_cache.sampled(lane, body)
        if added is not None and (added[0] or added[1]):
            self.series.cached(lane.instance, *added)  # [series hook]

    def snapshot(self) -> CountersJson:
        """Every counter, as rows of labels and counts (see :class:`CountersJson`)."""
        return {
            "requests": [(*k, n) for k, n in self.requests.items()],
            "retries": list(self.retries.items()),
            "rejected": [(*k, n) for k, n in self.rejected.items()],
            "upstream_errors": [(*k, n) for k, n in self.upstream_errors.items()],
            "metrics_errors": list(self.metrics_errors.items()),
            "ejections": list(self.ejections.items()),
            "prefix_routed": [(*k, n) for k, n in self.prefix_routed.items()],
            "lane_cache": [(lane, q, h) for lane, (q, h) in self.lane_cache.totals.items()],
            "histogram": [(m, counts, self._sum[m]) for m, counts in self._hist.items()],
            "body_bytes": self._body_bytes(),
            "waiting": self._waiting(),
        }

    def _body_bytes(self) -> int:
        return self.body_bytes + (0 if self.bodies is None else self.bodies.used)

    def _waiting(self) -> list[Counted]:
        total = self.waiting.copy()
        for model, n in self.waiting_now():
            total[model] += n
        return sorted(total.items())

    def add(self, snapshot: CountersJson) -> None:
        """Add another worker's :meth:`snapshot` to these counters."""
        labelled = (
            (self.requests, snapshot["requests"]),
            (self.rejected, snapshot["rejected"]),
            (self.upstream_errors, snapshot["upstream_errors"]),
            (self.prefix_routed, snapshot["prefix_routed"]),
        )
        for counter, rows in labelled:
            for first, second, n in rows:
                counter[(first, second)] += n
        counted = (
            (self.retries, snapshot["retries"]),
            (self.metrics_errors, snapshot["metrics_errors"]),
            (self.ejections, snapshot["ejections"]),
        )
        for single, pairs in counted:
            for label, n in pairs:
                single[label] += n
        for lane, queries, hits in snapshot["lane_cache"]:
            self.lane_cache.add(lane, queries, hits)
        self.body_bytes += snapshot["body_bytes"]
        for model, n in snapshot["waiting"]:
            self.waiting[model] += n
        for model, counts, total in snapshot["histogram"]:
            mine = self._hist.setdefault(model, [0] * (len(BUCKETS) + 1))
            for i, n in enumerate(counts):
                mine[i] += n
            self._sum[model] += total

    def render(
        self,
        lanes: LaneTable,
        now: float,
        stale_after: float,
        workers: Sequence[tuple[int, int]] = (),
    ) -> bytes:
        """The Prometheus text; ``workers``: (index, pid) of each worker that reported."""
        out: list[str] = []
        _family(out, "requests_total", "counter", "Requests answered, by model and status.")
        for (model, status), n in sorted(self.requests.items()):
            out.append(
                f"ddsup_endpoint_requests_total{{model={_q(model)},status={_q(status)}}} {n}"
            )
        _family(out, "retries_total", "counter", "Requests sent again to another lane.")
        for model, n in sorted(self.retries.items()):
            out.append(f"ddsup_endpoint_retries_total{{model={_q(model)}}} {n}")
        _family(out, "rejected_total", "counter", "Requests refused with 429, by reason.")
        for (model, reason), n in sorted(self.rejected.items()):
            out.append(
                f"ddsup_endpoint_rejected_total{{model={_q(model)},reason={_q(reason)}}} {n}"
            )
        _family(out, "upstream_errors_total", "counter", "Failed attempts, by lane and kind.")
        for (lane, kind), n in sorted(self.upstream_errors.items()):
            out.append(
                f"ddsup_endpoint_upstream_errors_total{{lane={_q(lane)},kind={_q(kind)}}} {n}"
            )
        _family(out, "prefix_routed_total", "counter", "Prefix-routed requests, by choice.")
        for (model, how), n in sorted(self.prefix_routed.items()):
            labels = f"model={_q(model)},choice={_q(how)}"
            out.append(f"ddsup_endpoint_prefix_routed_total{{{labels}}} {n}")
        _family(out, "request_body_bytes", "gauge", "Bytes of request bodies held in memory.")
        out.append(f"ddsup_endpoint_request_body_bytes {self._body_bytes()}")
        _family(out, "waiting_requests", "gauge", "Requests waiting for a lane's free slot.")
        for model, n in self._waiting():
            out.append(f"ddsup_endpoint_waiting_requests{{model={_q(model)}}} {n}")
        self._render_lanes(out, lanes, now, stale_after)
        self._render_histogram(out)
        _family(out, "worker_info", "gauge", "1 for each worker process counted in this scrape.")
        for index, pid in workers:
            out.append(f'ddsup_endpoint_worker_info{{worker="{index}",pid="{pid}"}} 1')
        return ("\n".join(out) + "\n").encode()

    def _render_lanes(self, out: list[str], lanes: LaneTable, now: float, stale: float) -> None:
        states = sorted(lanes.states(), key=lambda s: s.info.instance)
        _family(out, "lane_outstanding", "gauge", "Requests in flight to each ready lane.")
        for s in states:
            labels = f"lane={_q(s.info.instance)},model={_q(s.info.model)}"
            out.append(f"ddsup_endpoint_lane_outstanding{{{labels}}} {s.outstanding}")
        _family(out, "lane_queue", "gauge", "Queue used for admission (outstanding or sampled).")
        for s in states:
            labels = f"lane={_q(s.info.instance)},model={_q(s.info.model)}"
            out.append(f"ddsup_endpoint_lane_queue{{{labels}}} {s.queue(now, stale)}")
        _family(out, "lane_metrics_errors_total", "counter", "Failed /metrics samples per lane.")
        for lane, n in sorted(self.metrics_errors.items()):
            out.append(f"ddsup_endpoint_lane_metrics_errors_total{{lane={_q(lane)}}} {n}")
        _family(out, "lane_ejected", "gauge", "1 while a lane is ejected (passive ejection).")
        for s in states:
            labels = f"lane={_q(s.info.instance)},model={_q(s.info.model)}"
            ejected = int(s.ejected_until > now * 1e6)
            out.append(f"ddsup_endpoint_lane_ejected{{{labels}}} {ejected}")
        _family(out, "lane_ejections_total", "counter", "Times each lane was ejected.")
        for lane, n in sorted(self.ejections.items()):
            out.append(f"ddsup_endpoint_lane_ejections_total{{lane={_q(lane)}}} {n}")
        self._render_cache(out)

    def _render_cache(self, out: list[str]) -> None:
        """The lanes' prefix-cache counters, summed over their restarts, and the hit ratio."""
        totals = sorted(self.lane_cache.totals.items())
        for at, what in ((0, "queries"), (1, "hits")):
            _family(
                out,
                f"lane_prefix_cache_{what}_total",
                "counter",
                f"Prompt tokens of the lane's vllm:prefix_cache_{what}_total, summed over its starts.",
            )
            for lane, total in totals:
                value = f"{total[at]:.17g}"
                out.append(
                    f"ddsup_endpoint_lane_prefix_cache_{what}_total{{lane={_q(lane)}}} {value}"
                )
        queries, hits = self.lane_cache.overall()
        _family(out, "prefix_cache_hit_ratio", "gauge", "Lanes' prefix-cache hits / queries.")
        out.append(
            f"ddsup_endpoint_prefix_cache_hit_ratio {hits / queries if queries else 0.0:.6g}"
        )

    def _render_histogram(self, out: list[str]) -> None:
        name = "ddsup_endpoint_request_duration_seconds"
        _family(out, "request_duration_seconds", "histogram", "Time from request to last byte.")
        for model, counts in sorted(self._hist.items()):
            total = 0
            for bound, n in zip((*BUCKETS, float("inf")), counts, strict=True):
                total += n
                le = "+Inf" if bound == float("inf") else repr(bound)
                out.append(f"{name}_bucket{{model={_q(model)},le={_q(le)}}} {total}")
            out.append(f"{name}_sum{{model={_q(model)}}} {self._sum[model]}")
            out.append(f"{name}_count{{model={_q(model)}}} {total}")


def _family(out: list[str], name: str, kind: str, help_text: str) -> None:
    out.append(f"# HELP ddsup_endpoint_{name} {help_text}")
    out.append(f"# TYPE ddsup_endpoint_{name} {kind}")


def _q(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'
