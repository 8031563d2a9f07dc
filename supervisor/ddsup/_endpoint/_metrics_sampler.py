"""Samples each ready lane's ``vllm:num_requests_waiting`` for admission control.

The endpoint's own outstanding count misses requests that reach a lane by other paths
(another endpoint, a direct client); the lane's queue length covers them. A sample is
only a hint: a failed fetch clears it and a stale one is ignored (see
:meth:`LaneState.queue`), so a broken /metrics never blocks traffic.
"""

from __future__ import annotations

import logging
import math

import httpx
import trio

from ddsup._endpoint._config import EndpointConfig
from ddsup._endpoint._lanes import LaneState, LaneTable
from ddsup._endpoint._metrics import Metrics

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


async def sample_lanes(config: EndpointConfig, lanes: LaneTable, metrics: Metrics) -> None:
    """Every ``metrics_interval``, fetch each ready lane's /metrics (until cancelled)."""
    limits = httpx.Limits(max_keepalive_connections=64)
    timeout = httpx.Timeout(config.metrics_timeout)
    async with httpx.AsyncClient(timeout=timeout, limits=limits, trust_env=False) as client:
        while True:
            tick = trio.current_time() + config.metrics_interval
            async with trio.open_nursery() as nursery:
                for state in lanes.states():
                    nursery.start_soon(_sample_one, client, config, state, metrics)
            await trio.sleep_until(tick)


async def _sample_one(
    client: httpx.AsyncClient, config: EndpointConfig, state: LaneState, metrics: Metrics
) -> None:
    waiting: int | None = None
    with trio.move_on_after(config.metrics_timeout):
        try:
            response = await client.get(f"{state.info.url}/metrics")
            if response.status_code == 200:
                waiting = parse_waiting(response.text)
        except httpx.HTTPError as err:
            log.debug("lane %s: /metrics failed: %s", state.info.instance, err)
    if waiting is None:
        metrics.metrics_errors[state.info.instance] += 1
    state.record_sample(waiting, trio.current_time())
