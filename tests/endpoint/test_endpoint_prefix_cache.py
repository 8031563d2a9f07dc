"""The lanes' prefix-cache hit rate, from their own counters, in the endpoint's
``/metrics`` and its time series.

``vllm:prefix_cache_queries_total`` and ``…_hits_total`` are read with each queue sample
and summed per lane over the run (a lane's restart counts from zero again); they reach
``/metrics`` whichever worker answers, and the series that ``ddsup report`` reads (worker
0's, when there are several: the parent samples).
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
import trio
from endpoint_fakes import FakeLane, Running, http_client, running_endpoint

from ddsup.record import read_series


def _sample(metrics: str, series: str) -> float | None:
    match = re.search(rf"^{re.escape(series)} (\S+)$", metrics, re.MULTILINE)
    return None if match is None else float(match.group(1))


async def _metrics_until(client: httpx.AsyncClient, ep: Running, series: str, value: float) -> str:
    """``/metrics`` once ``series`` reads ``value`` (sampled every 50 ms: a bounded poll)."""
    with trio.fail_after(10):
        while True:
            text = (await client.get(f"{ep.url}/metrics")).text
            if _sample(text, series) == value:
                return text
            await trio.sleep(0.02)


QUERIES = 'ddsup_endpoint_lane_prefix_cache_queries_total{lane="%s"}'
HITS = 'ddsup_endpoint_lane_prefix_cache_hits_total{lane="%s"}'


async def test_metrics_show_the_lanes_prefix_cache_hit_rate(
    workers: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DDSUP_STATE_DIR", str(tmp_path))  # the series too
    a, b, plain = FakeLane("a"), FakeLane("b"), FakeLane("plain")
    a.cache, b.cache = (834, 512), (100, 0)  # counted from zero when first sampled
    async with (
        running_endpoint([a, b, plain], workers=workers) as ep,
        http_client() as client,
    ):
        await _metrics_until(client, ep, QUERIES % "a", 834)
        a.cache = (1834, 1312)
        await _metrics_until(client, ep, HITS % "a", 1312)
        a.cache = (300, 200)  # a new process at the same address: from zero again
        text = await _metrics_until(client, ep, QUERIES % "a", 2134)
        assert _sample(text, HITS % "a") == 1512
        assert _sample(text, QUERIES % "b") == 100 and _sample(text, HITS % "b") == 0
        assert _sample(text, QUERIES % "plain") is None  # a lane without the counters
        ratio = _sample(text, "ddsup_endpoint_prefix_cache_hit_ratio")
        assert ratio == pytest.approx(1512 / 2234, rel=1e-5)
    series = read_series(tmp_path)
    assert series.files == workers and series.problems == ()
    assert series.prefix_cache() == (2234, 1512)
    by_lane: dict[str, list[int]] = {}
    for line in series.lines:
        for lane, (queries, hits) in line.prefix_cache.items():
            total = by_lane.setdefault(lane, [0, 0])
            total[0] += queries
            total[1] += hits
    assert by_lane == {"a": [2134, 1512], "b": [100, 0]}
