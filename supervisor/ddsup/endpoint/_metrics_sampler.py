"""Samples each ready lane's ``vllm:num_requests_waiting`` for admission control.

The endpoint's own outstanding count misses requests that reach a lane by other paths
(another endpoint, a direct client); the lane's queue length covers them. A sample is
only a hint: a failed fetch clears it and a stale one is ignored (see
:meth:`LaneState.queue`), so a broken /metrics never blocks traffic.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

import trio

from ddsup.endpoint._config import EndpointConfig
from ddsup.endpoint._ejection import note_returns
from ddsup.endpoint._lanes import LaneState, LaneTable
from ddsup.endpoint._metrics import Metrics
from ddsup.endpoint._upstream import UpstreamError, fetch

log = logging.getLogger("ddsup.endpoint")

WAITING = "vllm:num_requests_waiting"


def parse_waiting(text: str) -> int | None:
    """The sum of every ``vllm:num_requests_waiting`` sample, or ``None`` when absent."""
    total = 0.0
    found = False
    for line in text.splitlines():
        if not line.startswith(WAITING):
            continue
        rest = line[len(WAITING) :]
        if rest[:1] not in ("{", " "):
            continue  # another metric whose name starts the same way
        value = rest.rsplit("}", 1)[-1].split()
        if not value:
            continue
        try:
            number = float(value[0])
        except ValueError:
            continue
        if math.isfinite(number):
            total += number
            found = True
    return math.ceil(total) if found else None


Recorded = Callable[[LaneState], None]


async def sample_lanes(
    config: EndpointConfig, lanes: LaneTable, metrics: Metrics, recorded: Recorded | None = None
) -> None:
    """Every ``metrics_interval``, fetch each ready lane's /metrics (until cancelled).

    Samples travel on the lane's own keep-alive pool: no extra client library, and
    no TLS set-up cost (lanes speak plain HTTP on the allocation's network). With
    several workers the parent samples once for all of them: ``recorded`` is called
    right after each sample is recorded, and passes it on. Each round also logs the
    lanes back from a passive ejection (:func:`~._ejection.note_returns`).
    """
    ejected: set[int] = set()
    while True:
        tick = trio.current_time() + config.metrics_interval
        async with trio.open_nursery() as nursery:
            for state in lanes.states():
                nursery.start_soon(_sample_one, config, state, metrics, recorded)
        note_returns(lanes, ejected)  # the lanes back from an ejection: one line each
        await trio.sleep_until(tick)


async def _sample_one(
    config: EndpointConfig, state: LaneState, metrics: Metrics, recorded: Recorded | None
) -> None:
    waiting: int | None = None
    with trio.move_on_after(config.metrics_timeout):
        try:
            status, body = await fetch(state.pool, "/metrics", config.metrics_timeout)
            if status == 200:
                waiting = parse_waiting(body.decode("utf-8", errors="replace"))
        except UpstreamError as err:
            log.debug("lane %s: /metrics failed: %s", state.info.instance, err)
    if waiting is None:
        metrics.metrics_errors[state.info.instance] += 1
    state.record_sample(waiting, time.monotonic())
    if recorded is not None:
        recorded(state)
