"""Passive ejection: a lane whose requests keep failing leaves the rotation a while."""

from __future__ import annotations

import logging

import pytest
import trio
from endpoint_fakes import FakeLane, closed_port, http_client, running_endpoint
from prometheus_client.parser import text_string_to_metric_families

from ddsup.endpoint import LaneInfo


async def scrape(client_url: str) -> dict[str, dict[str, float]]:
    """``{family: {lane: value}}`` of the endpoint's per-lane ejection metrics."""
    async with http_client() as client:
        text = (await client.get(f"{client_url}/metrics")).text
    found: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        if family.name.startswith("ddsup_endpoint_lane_eject"):
            for sample in family.samples:
                found.setdefault(sample.name, {})[sample.labels["lane"]] = sample.value
    return found


async def test_a_refusing_lane_is_ejected_for_every_worker(workers: int) -> None:
    good = FakeLane("good")
    dead = LaneInfo("dead", "m", f"http://127.0.0.1:{closed_port()}")
    async with running_endpoint(
        [good], extra=[dead], eject_after=3, eject_for=30.0, workers=workers
    ) as ep:
        for _ in range(12):  # a connection each: they spread over the workers
            async with http_client() as client:
                response = await client.post(f"{ep.url}/v1/completions", json={"model": "m"})
                assert response.status_code == 200  # retried on the good lane
        metrics = await scrape(ep.url)
    assert metrics["ddsup_endpoint_lane_ejected"] == {"dead": 1.0, "good": 0.0}
    assert metrics["ddsup_endpoint_lane_ejections_total"] == {"dead": 1.0}
    assert good.completions == 12


async def test_a_lane_answering_5xx_is_ejected_then_returns_on_probation(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sick, well = FakeLane("sick"), FakeLane("well")
    sick.status = 500
    async with (
        running_endpoint([sick, well], eject_after=2, eject_for=0.3, retries=0) as ep,
        http_client() as client,
    ):
        url = f"{ep.url}/v1/completions"
        with caplog.at_level(logging.INFO, logger="ddsup.endpoint"):
            statuses = [(await client.post(url, json={"model": "m"})).status_code for _ in range(8)]
            # round robin until its second 500, then out; with no retry left, a lane's 500
            # is the endpoint's 502 (every tried lane failed), as a 502/503/504 is
            assert statuses.count(502) == 2
            assert sick.completions == 2 and well.completions == 6
            sick.status = 200
            with trio.fail_after(5):
                while "lane sick is back in the rotation" not in caplog.text:  # noqa: ASYNC110
                    await trio.sleep(0.02)  # bounded poll: the sampler notices on its tick
            for _ in range(4):
                assert (await client.post(url, json={"model": "m"})).status_code == 200
        assert sick.completions >= 4  # back, and its success cleared its record
        ejected = [r.getMessage() for r in caplog.records if "ejected" in r.getMessage()]
        assert ejected == ["lane sick ejected for 0.3 s: 2 failures in a row (last: answered 500)"]
        sick.status = 500  # fails again: two failures needed again (its record is clean)
        for _ in range(8):
            await client.post(url, json={"model": "m"})
        assert (await scrape(ep.url))["ddsup_endpoint_lane_ejections_total"] == {"sick": 2.0}


async def test_when_every_lane_is_ejected_they_are_tried_all_the_same() -> None:
    only = FakeLane("only")
    only.status = 503
    async with (
        running_endpoint([only], eject_after=1, eject_for=60.0, retries=0) as ep,
        http_client() as client,
    ):
        for _ in range(3):
            response = await client.post(f"{ep.url}/v1/completions", json={"model": "m"})
            assert response.status_code == 502  # tried (and failed), not refused unasked
        assert only.completions == 3
        assert (await scrape(ep.url))["ddsup_endpoint_lane_ejected"] == {"only": 1.0}


async def test_a_429_is_no_failure() -> None:
    busy, other = FakeLane("busy"), FakeLane("other")
    busy.status = 429
    async with (
        running_endpoint([busy, other], eject_after=1, eject_for=60.0) as ep,
        http_client() as client,
    ):
        for _ in range(4):
            response = await client.post(f"{ep.url}/v1/completions", json={"model": "m"})
            assert response.status_code == 200
        assert (await scrape(ep.url))["ddsup_endpoint_lane_ejected"] == {"busy": 0.0, "other": 0.0}
