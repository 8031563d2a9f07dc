"""Prefix-aware routing through a running endpoint: the records of a template reach the
lane that was sent the template (least-load spreads them), each worker of several routes
by prefix, an idle lane takes work from a busy one, and ``ddsup endpoint`` takes the
thresholds on its command line."""

from __future__ import annotations

import argparse
import re
from functools import partial

import pytest
import trio
from endpoint_fakes import FakeLane, http_client, running_endpoint

from ddsup._errors import UsageError
from ddsup.endpoint import configure_endpoint
from ddsup.endpoint._endpoint_command import config_from_args
from ddsup.units._model import Routing

TEMPLATES = [
    "You label product reviews as positive or negative. " * 12,
    "Translate the customer's message into formal French, keeping names. " * 10,
]


def record(template: int, i: int, who: str = "") -> dict[str, object]:
    return {"model": "m", "prompt": f"{TEMPLATES[template]}\nRecord {who}{i}: it arrived late."}


def chat(template: int, i: int) -> dict[str, object]:
    messages = [
        {"role": "system", "content": TEMPLATES[template]},
        {"role": "user", "content": f"Record {i}: it arrived late."},
    ]
    return {"model": "m", "messages": messages}


def lanes_of(lanes: list[FakeLane], text: str) -> set[str]:
    """The lanes that received a request whose body holds ``text``."""
    return {lane.name for lane in lanes for r in lane.received if text.encode() in r.body}


async def test_the_records_of_a_template_go_to_the_lane_that_has_it() -> None:
    lanes = [FakeLane("a"), FakeLane("b"), FakeLane("c")]
    async with (
        running_endpoint(lanes, routing=Routing.PREFIX) as ep,
        http_client() as client,
    ):
        for i in range(6):  # one at a time: every lane idle at each choice
            response = await client.post(f"{ep.url}/v1/completions", json=record(0, i))
            assert response.status_code == 200
            response = await client.post(f"{ep.url}/v1/chat/completions", json=chat(1, i))
            assert response.status_code == 200
        metrics = (await client.get(f"{ep.url}/metrics")).text
    assert sum(lane.completions for lane in lanes) == 12
    for template in TEMPLATES:  # least-load would send 2 to each lane
        assert len(lanes_of(lanes, template[:40])) == 1
    routed = 'ddsup_endpoint_prefix_routed_total{model="m",choice="%s"}'
    assert _sample(metrics, routed % "no_match") == 2  # each template's first
    assert _sample(metrics, routed % "prefix") == 10


async def test_least_load_spreads_the_records_of_a_template() -> None:
    lanes = [FakeLane("a"), FakeLane("b"), FakeLane("c")]
    async with (
        running_endpoint(lanes, routing=Routing.LEAST_LOAD) as ep,
        http_client() as client,
    ):
        for i in range(6):
            await client.post(f"{ep.url}/v1/completions", json=record(0, i))
        metrics = (await client.get(f"{ep.url}/metrics")).text
    assert all(lane.completions == 2 for lane in lanes)
    assert "ddsup_endpoint_prefix_routed_total{" not in metrics


async def test_every_worker_routes_by_prefix() -> None:
    """Each worker keeps its own index: a client's connection is served by one worker,
    whose choices keep the template's records on one lane."""
    lanes = [FakeLane("a"), FakeLane("b")]
    async with running_endpoint(lanes, workers=2, routing=Routing.PREFIX) as ep:
        for who in "xyz":
            async with http_client() as client:  # one keep-alive connection
                for i in range(4):
                    response = await client.post(f"{ep.url}/v1/completions", json=record(0, i, who))
                    assert response.status_code == 200
            assert len(lanes_of(lanes, f"Record {who}")) == 1, who


async def test_an_idle_lane_takes_work_from_a_busy_one() -> None:
    lanes = [FakeLane("a"), FakeLane("b")]
    async with (
        running_endpoint(lanes, routing=Routing.PREFIX) as ep,
        http_client() as client,
        trio.open_nursery() as nursery,
    ):
        lanes[0].hold = lanes[1].hold = held = trio.Event()
        for i in range(2):
            post = partial(client.post, f"{ep.url}/v1/completions", json=record(0, i))
            nursery.start_soon(post)
            with trio.fail_after(5):
                await _until_received(lanes, i + 1)
        assert [lane.completions for lane in lanes] == [1, 1]
        held.set()


async def _until_received(lanes: list[FakeLane], n: int) -> None:
    while sum(lane.completions for lane in lanes) < n:
        async with trio.open_nursery() as nursery:
            for lane in lanes:
                nursery.start_soon(_then_cancel, lane, nursery.cancel_scope)


async def _then_cancel(lane: FakeLane, scope: trio.CancelScope) -> None:
    await lane._changed.wait()
    scope.cancel()


def _sample(metrics: str, series: str) -> float | None:
    match = re.search(rf"^{re.escape(series)} (\S+)$", metrics, re.MULTILINE)
    return None if match is None else float(match.group(1))


def test_ddsup_endpoint_takes_the_thresholds_on_its_command_line() -> None:
    parser = argparse.ArgumentParser()
    configure_endpoint(parser)
    lane = ["--routing", "prefix", "--lane", "m=http://127.0.0.1:9"]
    flags = ["--prefix-balance-requests", "4", "--prefix-balance-ratio", "1"]
    config = config_from_args(parser.parse_args([*lane, *flags, "--prefix-min-match", "0.5"]))
    assert (config.routing, config.prefix_balance_requests) == (Routing.PREFIX, 4)
    assert (config.prefix_balance_ratio, config.prefix_min_match) == (1.0, 0.5)
    with pytest.raises(UsageError, match="prefix_balance_ratio >= 1"):
        config_from_args(parser.parse_args([*lane, "--prefix-balance-ratio", "0.5"]))
