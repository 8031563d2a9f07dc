"""What the endpoint's parent and workers say to each other survives the link, and what
does not fit is the link's error.

Each message goes through its encoder, JSON text and its decoder, as on the Unix socket
between the processes, and comes out equal; a scrape's counters gathered that way
render the same totals as the worker that counted them. A line that is not one of the
messages, or whose counters do not have their rows' shape, is a ``ChannelError`` at
the link, not an exception in the parent's scrape.
"""

from __future__ import annotations

import json

import pytest

from ddsup._json import JsonObject
from ddsup.channel import ChannelError
from ddsup.endpoint import _worker_link as link
from ddsup.endpoint._config import EndpointConfig
from ddsup.endpoint._lanes import LaneInfo, LaneTable
from ddsup.endpoint._metrics import Metrics
from ddsup.units import Routing


def _wired(message: link.Message) -> link.Message:
    data = json.loads(json.dumps(link.encode(message)))
    assert isinstance(data, dict)
    return link.decode(data)


def _counted() -> Metrics:
    metrics = Metrics()
    metrics.observe("m", 200, 0.02)
    metrics.observe("m", 429, 7.0)
    metrics.observe("other", 200, 400.0)
    metrics.retries["m"] += 2
    metrics.rejected[("m", "queue_full")] += 3
    metrics.upstream_errors[("lane@0", "connect")] += 1
    metrics.metrics_errors["lane@1"] += 4
    metrics.ejections["lane@1"] += 1
    metrics.prefix_routed[("m", "hit")] += 5
    metrics.lane_cache.add("lane@0", 1200.0, 800.5)
    metrics.body_bytes = 4096
    return metrics


A = LaneInfo("a@0", "m", "http://127.0.0.1:8001", ("alias",), "lane-key")
B = LaneInfo("b@0", "m", "http://127.0.0.1:8002")

MESSAGES: list[link.Message] = [
    link.Start(
        worker=1,
        rows=64,
        paced_gc=True,
        config=EndpointConfig(
            port=0,
            api_key="client-key",
            workers=None,
            open_routes=("/health",),
            routing=Routing.PREFIX,
            retry_after=2,
        ),
    ),
    link.Lanes(3, ((A, 0), (B, 1)), ("m",), ("alias", "m"), (("m", "adapter"), None)),
    link.LanesChanged(4, ((B, 2),), ("a@0",), ((B, ("adapter",)),), ("m",), ("m",)),
    link.Samples(5, ((0, 3), (1, None)), (("a@0", 10.0, 2.5),)),
    link.SnapshotWanted(6),
    link.Counters(6, _counted().snapshot()),
    link.Scrape(7),
    link.Scraped(7, _counted().snapshot(), ((0, 1234), (1, 1240))),
    link.Ready(),
    link.Applied(5),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_every_message_survives_the_link(message: link.Message) -> None:
    assert _wired(message) == message


def test_a_scrape_renders_the_counters_a_worker_sent() -> None:
    worker = _counted()
    answer = _wired(link.Counters(1, worker.snapshot()))
    assert isinstance(answer, link.Counters)
    total = Metrics()
    total.add(answer.counters)
    assert total.render(LaneTable(), 0.0, 1.0) == worker.render(LaneTable(), 0.0, 1.0)


def _counters_with(**rows: object) -> JsonObject:
    data = json.loads(json.dumps(link.encode(link.Counters(1, _counted().snapshot()))))
    assert isinstance(data, dict)
    data["counters"].update(rows)
    return data


@pytest.mark.parametrize(
    "data",
    [
        {"op": "teleport"},
        {"op": ["lanes"]},
        {"op": "applied"},
        {"op": "applied", "seq": "5"},
        {"op": "ready", "extra": 1},
        {"op": "samples", "seq": 1, "samples": [[0]], "cached": []},
        _counters_with(requests=[["m", 200, 1]]),
        _counters_with(retries="m"),
        _counters_with(histogram=[["m", [1, "2"], 0.1]]),
        _counters_with(body_bytes=1.5),
    ],
    ids=[
        "unknown op",
        "op not a string",
        "field missing",
        "string for a number",
        "unknown field",
        "short sample",
        "status not a string",
        "counter not rows",
        "bucket not a count",
        "bytes not whole",
    ],
)
def test_what_does_not_fit_is_the_links_error(data: JsonObject) -> None:
    with pytest.raises(ChannelError, match="malformed endpoint link message"):
        link.decode(data)
