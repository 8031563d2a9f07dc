"""One endpoint worker process (``ddsup endpoint --worker-of ADDRESS``, started by the parent).

It takes everything from its parent over the link (:mod:`._worker_link`): the
configuration, the listening sockets, its row of the shared counts table, then every
change of the lane table and every queue sample, each acknowledged once it routes by it.
It serves connections exactly as a single endpoint process does (:mod:`._server`), and
answers ``GET /metrics`` with the totals the parent gathers from every worker.

It ends on SIGTERM (the parent's stop) and when the link closes (the parent is gone, even
killed with SIGKILL): a worker never outlives its endpoint.
"""

from __future__ import annotations

import logging
import signal
import socket
import sys
import time

import trio

from ddsup.channel import ChannelError
from ddsup.endpoint import _worker_link as link
from ddsup.endpoint._gc_pacing import pace_garbage_collection
from ddsup.endpoint._lanes import LaneTable
from ddsup.endpoint._metrics import Metrics
from ddsup.endpoint._routes import Endpoint
from ddsup.endpoint._server import serve_connections
from ddsup.endpoint._shared_counts import SharedCounts

log = logging.getLogger("ddsup.endpoint")

SCRAPE_WAIT = 5.0  # seconds a scrape waits for the parent's totals (it waits 2 s per worker)


def run_worker(address: str) -> int:
    """The worker's whole life; exit status 0 when stopped, 1 when the link broke."""
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="endpoint: %(message)s")
    try:
        trio.run(serve_worker, address)
    except ChannelError as err:
        log.error("worker: link to the endpoint's parent broken: %s", err)
        return 1
    return 0


async def serve_worker(address: str) -> None:
    channel, start, fds = await link.connect(address)
    config = start.config
    counts = SharedCounts(fds[-1], start.rows, start.worker)
    table = LaneTable(max_idle=config.max_idle_upstream_connections, counts=counts)
    endpoint = Endpoint(config, table)
    follower = _Follower(channel, endpoint, records_cache=start.worker == 0)
    endpoint.render_metrics = follower.render_metrics
    listeners = [
        trio.SocketListener(trio.socket.from_stdlib_socket(socket.socket(fileno=fd)))
        for fd in fds[:-1]
    ]
    try:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:
                await nursery.start(serve_connections, endpoint, listeners)
                if start.paced_gc:
                    nursery.start_soon(pace_garbage_collection)
                await link.send(channel, link.Ready())
                nursery.start_soon(follower.follow, nursery.cancel_scope)
                async for _ in signals:
                    nursery.cancel_scope.cancel()
                    break
    finally:
        table.close()
        counts.close()
        await channel.aclose()
    if follower.broken is not None:
        raise follower.broken  # plainly, not from inside the nursery: exit status 1


class _Follower:
    """Applies the parent's messages to this worker and asks it for scrape totals."""

    def __init__(self, channel: link.Link, endpoint: Endpoint, *, records_cache: bool) -> None:
        self.channel = channel
        self.endpoint = endpoint
        self.records_cache = records_cache  # the lanes' cache counters go into our series
        self._scrapes: dict[int, link.Scraped | None] = {}
        self._answered = trio.Event()
        self._next_scrape = 0
        self.broken: ChannelError | None = None

    async def follow(self, scope: trio.CancelScope) -> None:
        """Until the parent closes the link, which ends the worker (``scope``)."""
        try:
            while (message := await link.receive(self.channel)) is not None:
                await self._apply(message)
        except (ChannelError, trio.BrokenResourceError, trio.ClosedResourceError) as err:
            self.broken = err if isinstance(err, ChannelError) else ChannelError(str(err))
        scope.cancel()

    async def _apply(self, message: link.Message) -> None:
        table = self.endpoint.lanes
        if isinstance(message, link.Lanes | link.LanesChanged):
            apply_lanes(table, message)
            await link.send(self.channel, link.Applied(message.seq))
        elif isinstance(message, link.Samples):
            now = time.monotonic()
            for slot, waiting in message.samples:
                state = table.state_at(slot)
                if state is not None:
                    state.record_sample(waiting, now)
            if self.records_cache:
                for lane, queries, hits in message.cached:
                    self.endpoint.metrics.series.cached(lane, queries, hits)  # [series hook]
            await link.send(self.channel, link.Applied(message.seq))
        elif isinstance(message, link.SnapshotWanted):
            counters = self.endpoint.metrics.snapshot()
            await link.send(self.channel, link.Counters(message.id, counters))
        elif isinstance(message, link.Scraped) and message.id in self._scrapes:
            self._scrapes[message.id] = message
            self._answered.set()
            self._answered = trio.Event()

    async def render_metrics(self) -> bytes:
        """``GET /metrics``: the totals over every worker, from the parent."""
        self._next_scrape += 1
        scrape_id = self._next_scrape
        self._scrapes[scrape_id] = None
        try:
            await link.send(self.channel, link.Scrape(scrape_id))
            with trio.move_on_after(SCRAPE_WAIT):
                while self._scrapes[scrape_id] is None:
                    await self._answered.wait()
            answer = self._scrapes[scrape_id]
        finally:
            del self._scrapes[scrape_id]
        total = Metrics()
        workers: tuple[tuple[int, int], ...] = ()
        if answer is None:
            log.warning("worker: no totals from the endpoint's parent; /metrics shows this worker")
            total.add(self.endpoint.metrics.snapshot())
        else:
            total.add(answer.counters)
            workers = answer.workers
        endpoint = self.endpoint
        now = time.monotonic()
        return total.render(endpoint.lanes, now, endpoint.config.metrics_stale_after, workers)


def apply_lanes(table: LaneTable, message: link.Lanes | link.LanesChanged) -> None:
    """The parent's lane table, or what changed in it, applied to this worker's: the slots
    and names first, so that a joining lane starts with the names it listed."""
    if isinstance(message, link.Lanes):
        table.use_slots(dict(message.lanes))
        table.declare_models(message.models)
        table.declare_names(message.names)
        for (info, _slot), names in zip(message.lanes, message.learned, strict=True):
            if names is not None:
                table.learn_names(info, names)
        table.set_ready(info for info, _slot in message.lanes)
        return
    table.use_slots(dict(message.joined))
    table.declare_models(message.models)
    table.declare_names(message.names)
    for info, names in message.learned:
        table.learn_names(info, names)
    table.change((info for info, _slot in message.joined), message.removed)
