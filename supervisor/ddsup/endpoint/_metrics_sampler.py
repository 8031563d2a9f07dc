"""Samples the ready lanes' ``vllm:num_requests_waiting`` for admission control.

The endpoint's own outstanding count misses requests that reach a lane by other paths
(another endpoint, a direct client); the lane's queue length covers them. A sample is
only a hint: a failed fetch clears it and a stale one is ignored (see
:meth:`LaneState.queue`), so a broken /metrics never blocks traffic.

Admission needs a fresh sample only of a lane it may send requests to: one that has
requests in flight from any worker of this endpoint (the shared counts), one that a
request began on since the last tick (the shared ``BEGUN`` mark: a short request may be
over by then), and one whose last sample showed a queue of its own (admission passes
over it, so nothing of ours marks it). Those are sampled every ``metrics_interval``
(1 s). Each lane is also sampled when it joins, and every other lane once per
``metrics_idle_interval`` (30 s), spread over the ticks by slot: fetching every lane
every second would keep a core busy in front of a thousand idle lanes.

The error bound this adds: when requests start going to a lane that was idle, its
sample may be up to ``metrics_idle_interval`` old, so stale (older than
``metrics_stale_after``) and ignored: until the next tick, at most ``metrics_interval``
plus ``metrics_timeout`` later, admission counts only the endpoint's own requests at
that lane, as it does when a fetch fails. It can then send the lane up to
``max_queue_per_lane`` (+ ``workers - 1``) requests on top of a queue that others built
meanwhile.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence

import trio

from ddsup.endpoint._config import EndpointConfig
from ddsup.endpoint._ejection import note_returns
from ddsup.endpoint._lanes import LaneState, LaneTable
from ddsup.endpoint._metrics import Metrics
from ddsup.endpoint._upstream import UpstreamError, fetch

log = logging.getLogger("ddsup.endpoint")

WAITING = b"vllm:num_requests_waiting"


def parse_waiting(body: bytes) -> int | None:
    """The sum of every ``vllm:num_requests_waiting`` sample, or ``None`` when absent.

    vLLM's /metrics is tens of kilobytes of histograms: only the lines that start with
    the gauge's name are looked at (found by ``bytes.find``), nothing is decoded whole.
    """
    total = 0.0
    found = False
    start = 0
    while (at := body.find(WAITING, start)) >= 0:
        start = at + len(WAITING)
        if at and body[at - 1] != 0x0A:
            continue  # inside a line: a comment (# HELP, # TYPE)
        end = body.find(b"\n", start)
        rest = body[start:] if end < 0 else body[start:end]
        if rest[:1] not in (b"{", b" "):
            continue  # another metric whose name starts the same way
        value = rest.rsplit(b"}", 1)[-1].split()
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


def due(state: LaneState, tick: int, idle_ticks: int) -> bool:
    """Whether tick number ``tick`` samples ``state`` (see the module docstring).

    Clears the lane's ``BEGUN`` mark before it reads the outstanding count, the order
    :meth:`LaneState.take_begun` needs.
    """
    if state.take_begun() or state.outstanding > 0:
        return True
    if state.waiting or state.sampled_at == -math.inf:
        return True  # a queue of its own, or never sampled
    return (tick + state.slot) % idle_ticks == 0


Recorded = Callable[[Sequence[LaneState]], None]
Taken = tuple[LaneState, int | None, float]


class _Fetches:
    """The lanes being fetched, and the samples taken that are not recorded yet."""

    def __init__(self) -> None:
        self.running: set[LaneState] = set()
        self._taken: list[Taken] = []
        self._idle = trio.Event()
        self._idle.set()

    def begin(self, state: LaneState) -> None:
        self.running.add(state)
        if self._idle.is_set():
            self._idle = trio.Event()

    def end(self, taken: Taken) -> None:
        self.running.discard(taken[0])
        self._taken.append(taken)
        if not self.running:
            self._idle.set()

    async def wait_idle(self) -> None:
        await self._idle.wait()

    def take(self) -> list[Taken]:
        taken, self._taken = self._taken, []
        return taken


async def sample_lanes(
    config: EndpointConfig, lanes: LaneTable, metrics: Metrics, recorded: Recorded | None = None
) -> None:
    """Every ``metrics_interval``, fetch the /metrics of the lanes :func:`due` then.

    Samples travel on the lane's own keep-alive pool: no extra client library, and
    no TLS set-up cost (lanes speak plain HTTP on the allocation's network). A round's
    samples are recorded together once its fetches are over or the interval has passed,
    each with its own time; with several workers the parent samples once for all of
    them, and ``recorded`` passes the round on in one message. A fetch slower than the
    interval (vLLM's API server renders its /metrics, ~70 KB, in a worker thread that a
    burst starves: seconds) goes on, up to ``metrics_timeout``, without holding back the
    other lanes' rounds; its lane is not asked again meanwhile, and its sample is
    recorded with the round during which it arrived. Each round also logs the lanes back
    from a passive ejection (:func:`~._ejection.note_returns`).
    """
    ejected: set[int] = set()
    idle_ticks = max(1, round(config.metrics_idle_interval / config.metrics_interval))
    fetches = _Fetches()
    tick = 0
    async with trio.open_nursery() as nursery:
        while True:
            deadline = trio.current_time() + config.metrics_interval
            for state in lanes.states():
                if state not in fetches.running and due(state, tick, idle_ticks):
                    fetches.begin(state)
                    nursery.start_soon(_sample_one, config, state, metrics, fetches)
            with trio.move_on_at(deadline):
                await fetches.wait_idle()
            # A lane that left while fetched is not recorded: its slot may be another's now.
            taken = [t for t in fetches.take() if lanes.state_of(t[0].info.instance) is t[0]]
            for state, waiting, at in taken:
                state.record_sample(waiting, at)
            if recorded is not None and taken:
                recorded([state for state, _, _ in taken])
            note_returns(lanes, ejected)  # the lanes back from an ejection: one line each
            tick += 1
            await trio.sleep_until(deadline)


async def _sample_one(
    config: EndpointConfig, state: LaneState, metrics: Metrics, fetches: _Fetches
) -> None:
    waiting: int | None = None
    with trio.move_on_after(config.metrics_timeout) as timer:
        try:
            status, body = await fetch(state.pool, "/metrics", config.metrics_timeout)
            if status == 200:
                waiting = parse_waiting(body)
                metrics.cache_sampled(state.info, body)
            else:
                log.debug("lane %s: /metrics answered %d", state.info.instance, status)
        except UpstreamError as err:
            log.debug("lane %s: /metrics failed: %s", state.info.instance, err)
    if timer.cancelled_caught:
        log.debug("lane %s: /metrics took over %g s", state.info.instance, config.metrics_timeout)
    if waiting is None:
        metrics.metrics_errors[state.info.instance] += 1
    fetches.end((state, waiting, time.monotonic()))
