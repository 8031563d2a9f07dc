"""The endpoint's parent process with ``workers > 1``: it starts, feeds and stops them.

One Python process serves one core; ``workers`` processes serve one port together. The
parent binds the port, starts each worker as a real child process through ddsup's
process layer (``ddsup endpoint --worker-of ADDRESS``: a fresh interpreter, never a
``fork()`` of a running trio process), and hands it the listening sockets, the shared
counts table and the configuration over the link (:mod:`._worker_link`). Workers accept
from the same listening sockets, so a connection queued there is served by whichever
worker is free, and a worker that stops leaves none behind in a queue of its own.

The parent keeps the one lane table (fed by ``ddsup start`` or ``--lane``), samples the
lanes' queues once for all, and passes every change on; it gathers every worker's
counters when one of them answers ``GET /metrics``. A worker that ends unexpectedly
ends the endpoint (exit status 1, the worker and its status in the log): ddsup's restart
policy for the endpoint unit then decides, as for any other crash. On a stop each worker
gets SIGTERM and ``WORKER_STOP_TIMEOUT`` seconds, then SIGKILL, and is always reaped; a
worker whose parent vanishes (SIGKILL) sees its link close and exits by itself.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

import trio

from ddsup._errors import DdsupError
from ddsup.channel import ChannelError
from ddsup.endpoint import _worker_link as link
from ddsup.endpoint._config import EndpointConfig
from ddsup.endpoint._lane_names import learn_lane_names
from ddsup.endpoint._lanes import LaneInfo, LaneState, LaneTable, Touched
from ddsup.endpoint._metrics import CountersJson, Metrics
from ddsup.endpoint._metrics_sampler import sample_lanes
from ddsup.endpoint._shared_counts import SharedCounts
from ddsup.endpoint._timeseries import CacheHandover  # [series hook]
from ddsup.process import ChildProcess, SpawnError, spawn

STDERR = 2
log = logging.getLogger("ddsup.endpoint")

START_TIMEOUT = 60.0  # seconds for a worker to start its interpreter and serve
SCRAPE_TIMEOUT = 2.0  # seconds the parent waits for every worker's counters
WORKER_STOP_TIMEOUT = 10.0  # seconds between a worker's SIGTERM and its SIGKILL
LINK_GRACE = 1.0  # seconds a broken link waits for its worker's exit (the clearer error)


class WorkerFailed(DdsupError):
    """A worker could not start, or ended while the endpoint was serving."""


@dataclass
class _Worker:
    """One worker process and its end of the link."""

    index: int
    child: ChildProcess
    channel: link.Link | None = None
    applied: int = 0
    outbox: trio.MemorySendChannel[link.Message] | None = None


@dataclass
class _Gathering:
    """A scrape in progress: the counters received so far."""

    waiting: set[int]
    counters: list[CountersJson] = field(default_factory=list)
    done: trio.Event = field(default_factory=trio.Event)


class WorkerPool:
    """The workers of one endpoint; :meth:`run` owns them from start to reaping."""

    def __init__(
        self, config: EndpointConfig, lanes: LaneTable, count: int, *, paced_gc: bool
    ) -> None:
        self.config = config
        self.lanes = lanes
        self.count = count
        self.paced_gc = paced_gc
        self.metrics = Metrics()  # the parent's own: /metrics sample failures
        self._cached = CacheHandover()  # the lanes' cache counters, for worker 0's series
        self.metrics.series = self._cached
        self._workers: list[_Worker] = []
        self._seq = 0
        self._touched: Touched | None = None  # the table's changes since the last send
        self._sent: dict[str, LaneState] | None = None  # the lanes the workers have
        self._progress = trio.Event()
        self._gatherings: dict[int, _Gathering] = {}
        self._next_gathering = 0
        self._nursery: trio.Nursery | None = None
        self._stopping = False
        self.failure: WorkerFailed | None = None

    @property
    def pids(self) -> list[int]:
        return [worker.child.pid for worker in self._workers]

    async def run(
        self,
        listeners: list[trio.SocketListener],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Start the workers, serve until cancelled, then stop them all and reap them.

        A worker that fails is :attr:`failure`, raised here once every worker is stopped
        (not from inside a nursery, so that it reaches the user as one clear error).
        """
        counts = SharedCounts.create(rows=self.count + 1, row=self.count)  # last row: ours
        self.lanes.share_counts(counts)
        try:
            with self.lanes.watch_changes() as self._touched:
                await self._serve(listeners, counts, task_status)
        finally:
            self.lanes.on_change = None
            self._stopping = True
            with trio.CancelScope(shield=True):
                await self._stop_all()
            counts.close()
        if self.failure is not None:
            raise self.failure

    async def _serve(
        self,
        listeners: list[trio.SocketListener],
        counts: SharedCounts,
        task_status: trio.TaskStatus[None],
    ) -> None:
        """The workers started, the lanes handed on, until cancelled (see :meth:`run`)."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            fds = [listener.socket.fileno() for listener in listeners]
            assert counts.fd is not None
            await self._start_all([*fds, counts.fd], nursery)
            if self.failure is None:
                self.lanes.on_change = self._lanes_changed
                self._lanes_changed()
                await self.synced()  # serving means: serving the lanes of the table
                await nursery.start(learn_lane_names, self.config, self.lanes)
                await self.synced()  # the names learned at the start reached everyone
                recorded = self._samples_recorded
                nursery.start_soon(sample_lanes, self.config, self.lanes, self.metrics, recorded)
                task_status.started()

    async def synced(self) -> None:
        """Until every worker routes by the lane table and samples as they are now."""
        target = self._seq
        while any(worker.applied < target for worker in self._workers):
            await self._progress.wait()

    async def _start_all(self, fds: list[int], nursery: trio.Nursery) -> None:
        """Spawn every worker and hand each its start; a failure is recorded (:meth:`_fail`)."""
        address = link.new_address()
        server = await link.listen(address)
        try:
            by_pid: dict[int, _Worker] = {}
            for index in range(self.count):
                child = await self._spawn(address)
                if child is None:
                    return
                worker = _Worker(index, child)
                self._workers.append(worker)
                by_pid[worker.child.pid] = worker
                nursery.start_soon(self._monitor, worker)
            with trio.move_on_after(START_TIMEOUT) as timer:
                while not all(worker.channel for worker in self._workers):
                    await self._handshake(server, by_pid, fds, nursery)
            if timer.cancelled_caught:
                late = [w.index for w in self._workers if w.channel is None]
                self._fail(f"endpoint workers {late} did not start within {START_TIMEOUT:g} s")
                return
        finally:
            server.close()
        log.info("workers: %s", " ".join(f"{w.index}={w.child.pid}" for w in self._workers))

    async def _spawn(self, address: str) -> ChildProcess | None:
        argv = [sys.executable, "-m", "ddsup", "endpoint", "--worker-of", address]
        try:
            # the parent's stderr (under ddsup start: the endpoint's log), shared as is
            return await spawn(argv, env=os.environ, cwd=os.getcwd(), log_path=STDERR)
        except SpawnError as err:
            self._fail(f"cannot start an endpoint worker: {err}")
            return None

    def _fail(self, message: str) -> None:
        """Record the endpoint's failure (the first one counts) and end :meth:`run`."""
        if self.failure is None:
            self.failure = WorkerFailed(message)
        assert self._nursery is not None
        self._nursery.cancel_scope.cancel()

    async def _handshake(
        self,
        server: trio.socket.SocketType,
        by_pid: dict[int, _Worker],
        fds: list[int],
        nursery: trio.Nursery,
    ) -> None:
        sock, _ = await server.accept()
        worker = by_pid.get(link.peer_pid(sock))
        if worker is None or worker.channel is not None:
            sock.close()  # not one of ours: it gets nothing
            return
        start = link.Start(worker.index, self.count + 1, self.paced_gc, self.config)
        channel = link.open_link(trio.SocketStream(sock))
        try:
            await link.send_start(sock, start, fds)
            ready = await link.receive(channel)
        except (ChannelError, OSError, trio.BrokenResourceError):
            ready = None
        if not isinstance(ready, link.Ready):
            sock.close()
            return  # the worker's own log says why; _monitor reports its exit
        worker.channel = channel
        send, receive = trio.open_memory_channel[link.Message](math.inf)
        worker.outbox = send
        nursery.start_soon(self._write, worker, receive)
        nursery.start_soon(self._read, worker)

    async def _monitor(self, worker: _Worker) -> None:
        status = await worker.child.wait()
        if not self._stopping:
            self._fail(
                f"endpoint worker {worker.index} (pid {worker.child.pid}) ended unexpectedly "
                f"({status.describe()}); the endpoint stops so that its restart policy applies"
            )

    async def _write(
        self, worker: _Worker, outbox: trio.MemoryReceiveChannel[link.Message]
    ) -> None:
        assert worker.channel is not None
        async for message in outbox:
            try:
                await link.send(worker.channel, message)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return  # the worker is gone: _monitor says so

    async def _read(self, worker: _Worker) -> None:
        assert worker.channel is not None
        try:
            while (message := await link.receive(worker.channel)) is not None:
                self._received(worker, message)
        except (ChannelError, trio.BrokenResourceError, trio.ClosedResourceError) as err:
            with trio.move_on_after(LINK_GRACE):
                await worker.child.wait()
                return  # the worker ended: _monitor says how, which says more
            if not self._stopping:  # a worker the parent cannot reach is one it cannot feed
                self._fail(f"endpoint worker {worker.index}: its link broke ({err})")

    def _received(self, worker: _Worker, message: link.Message) -> None:
        if isinstance(message, link.Applied):
            worker.applied = message.seq
            self._progress.set()
            self._progress = trio.Event()
        elif isinstance(message, link.Counters):
            gathering = self._gatherings.get(message.id)
            if gathering is not None and worker.index in gathering.waiting:
                gathering.waiting.discard(worker.index)
                gathering.counters.append(message.counters)
                if not gathering.waiting:
                    gathering.done.set()
        elif isinstance(message, link.Scrape):
            assert self._nursery is not None
            self._nursery.start_soon(self._scrape, worker, message.id)
        else:
            log.warning("endpoint worker %d sent %s", worker.index, type(message).__name__)

    def _broadcast(self, message: link.Message) -> None:
        for worker in self._workers:
            if worker.outbox is not None:
                worker.outbox.send_nowait(message)

    def _lanes_changed(self) -> None:
        """Pass the table's change on: the whole table the first time, then only the lanes
        a change touched (:class:`link.LanesChanged`): a start whose lanes join one by one
        costs each worker a lane per message, where the whole table each time made it
        quadratic."""
        self._seq += 1
        touched = self._touched
        assert touched is not None
        if self._sent is None:
            self._sent = {state.info.instance: state for state in self.lanes.states()}
            message: link.Lanes | link.LanesChanged = self._whole_table()
        else:
            message = self._changes(touched, self._sent)
        touched.instances.clear()
        touched.learned.clear()
        self._broadcast(message)

    def _changes(self, touched: Touched, sent: dict[str, LaneState]) -> link.LanesChanged:
        """What ``touched`` changed against what the workers have (``sent``, kept up)."""
        table = self.lanes
        joined: list[tuple[LaneInfo, int]] = []
        removed: list[str] = []
        for instance in touched.instances:
            state = table.state_of(instance)
            if state is None:
                if sent.pop(instance, None) is not None:
                    removed.append(instance)
            elif sent.get(instance) is not state:
                sent[instance] = state
                joined.append((state.info, state.slot))
        learned = tuple((info, table.learned_names(info) or ()) for info in touched.learned)
        models, names = tuple(table.known_models()), tuple(table.known_names())
        return link.LanesChanged(self._seq, tuple(joined), tuple(removed), learned, models, names)

    def _whole_table(self) -> link.Lanes:
        table = self.lanes
        lanes = tuple((info, table.slot_of(info)) for info in table.infos())
        learned = table.learned()
        return link.Lanes(
            self._seq,
            lanes,
            tuple(table.known_models()),
            tuple(table.known_names()),
            tuple(learned.get(info) for info, _slot in lanes),
        )

    def _samples_recorded(self, states: Sequence[LaneState]) -> None:
        self._seq += 1
        samples = tuple((state.slot, state.waiting) for state in states)
        self._broadcast(link.Samples(self._seq, samples, self._cached.take()))

    async def _scrape(self, asking: _Worker, scrape_id: int) -> None:
        """Gather every worker's counters, add the parent's, answer ``asking``."""
        self._next_gathering += 1
        gathering_id = self._next_gathering
        answering = {w.index for w in self._workers if w.outbox is not None}
        gathering = self._gatherings[gathering_id] = _Gathering(set(answering))
        if not answering:
            gathering.done.set()
        self._broadcast(link.SnapshotWanted(gathering_id))
        with trio.move_on_after(SCRAPE_TIMEOUT):
            await gathering.done.wait()
        del self._gatherings[gathering_id]
        if gathering.waiting:
            log.warning(
                "endpoint workers %s sent no counters for a scrape", sorted(gathering.waiting)
            )
        total = Metrics()
        total.add(self.metrics.snapshot())
        for counters in gathering.counters:
            total.add(counters)
        counted = tuple(
            (w.index, w.child.pid)
            for w in self._workers
            if w.index in answering - gathering.waiting
        )
        if asking.outbox is not None:
            asking.outbox.send_nowait(link.Scraped(scrape_id, total.snapshot(), counted))

    async def _stop_all(self) -> None:
        """SIGTERM every worker, SIGKILL after the timeout, reap them all (in parallel)."""
        async with trio.open_nursery() as nursery:
            for worker in self._workers:
                nursery.start_soon(worker.child.stop, signal.SIGTERM, WORKER_STOP_TIMEOUT)
        for worker in self._workers:
            if worker.channel is not None:
                await worker.channel.aclose()
