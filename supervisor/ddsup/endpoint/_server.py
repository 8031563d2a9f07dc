"""The endpoint's HTTP/1.1 server: trio listeners, one task per connection.

Purpose-built rather than hypercorn because the data path's cost budget (BENCHMARKS.md)
is below hypercorn's own per-request floor. Each connection is one task of the server's
nursery (:mod:`._accept`), reading with httptools and raw socket calls
(:mod:`._client`). The server owns keep-alive cycles, timeouts and limits, and
containment: nothing that happens on one connection can end the server.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import trio

from ddsup._errors import DdsupError, StateDirError
from ddsup.endpoint._accept import connection_cap, raise_fd_limit, serve_listeners
from ddsup.endpoint._api_errors import ApiError, request_timeout
from ddsup.endpoint._client import Client, HeadTimeout
from ddsup.endpoint._config import EndpointConfig
from ddsup.endpoint._connection import Abort, ClientGone
from ddsup.endpoint._lane_names import learn_lane_names
from ddsup.endpoint._lanes import LaneTable
from ddsup.endpoint._metrics_sampler import sample_lanes
from ddsup.endpoint._notices import NOTICES
from ddsup.endpoint._routes import Endpoint, handle_request
from ddsup.endpoint._timeseries import open_series, write_series  # [series hook]
from ddsup.endpoint._wire import Wire
from ddsup.endpoint._workers import WorkerFailed, WorkerPool
from ddsup.record import WORKERS_FILE, HeldDir, open_private_dir

log = logging.getLogger("ddsup.endpoint")


@dataclass(frozen=True)
class Serving:
    """An endpoint that serves: its port, the PIDs serving it, and :attr:`synced`.

    ``synced()`` returns once every worker routes by the lane table (and the queue
    samples) as they are now; with one worker the table is the one it routes by.
    """

    port: int
    pids: tuple[int, ...]
    synced: Callable[[], Awaitable[None]]


async def _already_synced() -> None:
    await trio.lowlevel.checkpoint()


@asynccontextmanager
async def open_endpoint(
    config: EndpointConfig, lanes: LaneTable, *, paced_gc: bool = False
) -> AsyncIterator[Serving]:
    """Serve ``lanes`` with ``config.workers`` processes while the block runs.

    One worker serves in this process. More are child processes (:mod:`._workers`);
    ``paced_gc`` then tells them to pace their garbage collection (this process's
    own setting is its caller's). On leaving the block, the listeners, every
    connection, every idle upstream connection and every worker are closed or stopped.
    A worker failing ends the block with :class:`WorkerFailed`.
    """
    listeners = await _listen(config)
    port = listeners[0].socket.getsockname()[1]
    count = config.worker_count()
    pool = WorkerPool(config, lanes, count, paced_gc=paced_gc) if count > 1 else None
    try:
        async with trio.open_nursery() as nursery:
            if pool is None:
                endpoint = Endpoint(config, lanes)
                await nursery.start(learn_lane_names, config, lanes)
                nursery.start_soon(sample_lanes, config, lanes, endpoint.metrics)
                await nursery.start(serve_connections, endpoint, listeners)
                yield Serving(port, (os.getpid(),), _already_synced)
            else:
                await nursery.start(_run_pool, pool, listeners, nursery.cancel_scope)
                yield Serving(port, tuple(pool.pids), pool.synced)
            nursery.cancel_scope.cancel()
    finally:
        lanes.close()
        for listener in listeners:
            listener.socket.close()
    if pool is not None and pool.failure is not None:
        raise pool.failure


async def _listen(config: EndpointConfig) -> list[trio.SocketListener]:
    try:
        return await trio.open_tcp_listeners(config.port, host=config.bind)
    except OSError as err:
        where = f"{config.bind}:{config.port}"
        raise DdsupError(f"the endpoint cannot listen on {where}: {err.strerror or err}") from err


async def _run_pool(
    pool: WorkerPool,
    listeners: list[trio.SocketListener],
    scope: trio.CancelScope,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """The pool's failure after start cancels ``scope``; its owner raises it (plainly)."""
    with suppress(WorkerFailed):
        await pool.run(listeners, task_status=task_status)
    scope.cancel()


async def serve_endpoint(
    config: EndpointConfig,
    lanes: LaneTable,
    *,
    paced_gc: bool = False,
    on_failure: Callable[[WorkerFailed], None] | None = None,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until cancelled; ``task_status.started(port)`` once serving (port 0 allowed).

    A failure after the start goes to ``on_failure`` when given (a process's entry point
    reports it and exits; raised from a nursery it would come wrapped in a group).
    Under ``ddsup start`` (``$DDSUP_STATE_DIR`` set) the serving PIDs are written to
    :data:`WORKERS_FILE` in the state directory while the endpoint serves.
    """
    started = False
    try:
        async with open_endpoint(config, lanes, paced_gc=paced_gc) as serving:
            published = _publish(serving)
            try:
                task_status.started(serving.port)
                started = True
                await trio.sleep_forever()
            finally:
                if published is not None:
                    published.unlink(WORKERS_FILE)
                    published.close()
    except WorkerFailed as err:
        if on_failure is None or not started:
            raise
        on_failure(err)


def _publish(serving: Serving) -> HeldDir | None:
    """Write the serving PIDs where ``ddsup status`` can find them (see docs/cli.md),
    into the state directory held (and checked private) from here on; that held
    directory, to remove the file from at the end."""
    state_dir = os.environ.get("DDSUP_STATE_DIR")
    if not state_dir or not Path(state_dir).is_dir():
        return None
    path = Path(state_dir) / WORKERS_FILE
    record = {"pid": os.getpid(), "port": serving.port, "workers": list(serving.pids)}
    try:
        held = open_private_dir(state_dir, Path(state_dir), error=StateDirError)
    except (OSError, StateDirError) as err:
        log.warning("cannot write %s: %s", path, err)
        return None
    try:
        held.write(WORKERS_FILE, json.dumps(record) + "\n")
    except OSError as err:
        log.warning("cannot write %s: %s", path, err)
        held.close()
        return None
    return held


async def serve_connections(
    endpoint: Endpoint,
    listeners: list[trio.SocketListener],
    *,
    task_status: trio.TaskStatus[list[trio.SocketListener]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Accept and serve connections on ``listeners`` until cancelled.

    Each serving process (the one endpoint process, or each worker) raises its file
    descriptor limit, caps its connections and writes its own time series file.
    """
    cap = connection_cap(endpoint.config.max_connections, raise_fd_limit())
    endpoint.metrics.series = open_series(os.environ)  # [series hook] one file per process
    async with trio.open_nursery() as nursery:
        nursery.start_soon(endpoint.deadlines.run)
        if endpoint.proxy.slots is not None:
            nursery.start_soon(endpoint.proxy.slots.run)
        await nursery.start(endpoint.hangups.run)
        nursery.start_soon(write_series, endpoint.metrics.series)  # [series hook]
        handler = partial(_serve_connection, endpoint)
        await nursery.start(partial(serve_listeners, handler, listeners, max_connections=cap))
        task_status.started(listeners)


async def _serve_connection(endpoint: Endpoint, stream: trio.SocketStream) -> None:
    """Serve requests on one connection until either side is done; never raises."""
    wire = Wire.from_stream(stream)
    client = Client(wire, endpoint.config)
    endpoint.deadlines.add(client)
    endpoint.hangups.add(wire.fd, client.hangup)
    try:
        await _serve_requests(endpoint, client)
        if client.linger_wanted:
            await client.linger()  # answered early: let the client read the answer
    except Exception:
        NOTICES.note("bug", logging.ERROR, "bug on a client connection; closing it", exc_info=True)
    finally:
        endpoint.deadlines.discard(client)
        endpoint.hangups.discard(wire.fd)
        wire.close()


async def _serve_requests(endpoint: Endpoint, client: Client) -> None:
    """The connection's keep-alive loop."""
    try:
        while True:
            try:
                request = await client.read_head()
            except HeadTimeout:
                if client.buffer:  # it had begun: 408 (an idle connection closes silently)
                    await client.reject(request_timeout("request head"))
                    client.linger_wanted = True
                return
            except ApiError as refusal:  # refused as it stands (400, 431, 505, …): then closed
                await client.reject(refusal)
                client.linger_wanted = True
                return
            if request is None:
                return
            await handle_request(endpoint, client, request)
            if not client.keep_alive():
                client.linger_wanted = client.linger_wanted or _more_was_sent(client)
                return
    except (Abort, ClientGone, OSError):
        client.linger_wanted = False


def _more_was_sent(client: Client) -> bool:
    """Whether the client sent bytes beyond the request just answered (read, or still in
    the kernel): closing on them would reset the connection, and the reset can destroy
    the answer before the client reads it (RFC 9112 §9.6: close in stages)."""
    if client.buffer:
        return True
    try:
        return bool(client.wire.sock.recv(1, socket.MSG_PEEK))
    except OSError:  # nothing there (would block), or the connection is gone
        return False
