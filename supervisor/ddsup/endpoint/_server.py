"""The endpoint's HTTP/1.1 server: trio listeners, one task per connection, h11 framing.

Purpose-built rather than hypercorn because the data path's cost budget (BENCHMARKS.md, "Endpoint") is
below hypercorn's own per-request floor. The server owns what h11 leaves to its user:
keep-alive cycles, timeouts and limits (in :mod:`._client`), and containment: nothing
that happens on one connection can end the server.
"""

from __future__ import annotations

import logging
import os  # [series hook]
from functools import partial

import trio

from ddsup._errors import DdsupError
from ddsup.endpoint._client import Abort, Client, ClientGone
from ddsup.endpoint._config import EndpointConfig
from ddsup.endpoint._lanes import LaneTable
from ddsup.endpoint._metrics_sampler import sample_lanes
from ddsup.endpoint._routes import Endpoint, handle_request
from ddsup.endpoint._timeseries import open_series, write_series  # [series hook]

log = logging.getLogger("ddsup.endpoint")


async def serve_endpoint(
    config: EndpointConfig,
    lanes: LaneTable,
    *,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until cancelled; ``task_status.started(port)`` once bound (port 0 allowed).

    On cancellation the listeners, every client connection and every idle upstream
    connection are closed before this returns.
    """
    try:
        listeners = await trio.open_tcp_listeners(config.port, host=config.bind)
    except OSError as err:
        where = f"{config.bind}:{config.port}"
        raise DdsupError(f"the endpoint cannot listen on {where}: {err.strerror or err}") from err
    endpoint = Endpoint(config, lanes)
    endpoint.metrics.series = open_series(os.environ)  # [series hook]
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sample_lanes, config, lanes, endpoint.metrics)
            nursery.start_soon(write_series, endpoint.metrics.series)  # [series hook]
            handler = partial(_serve_connection, endpoint)
            await nursery.start(trio.serve_listeners, handler, listeners)
            task_status.started(listeners[0].socket.getsockname()[1])
    finally:
        lanes.close()


async def _serve_connection(endpoint: Endpoint, stream: trio.SocketStream) -> None:
    """Serve requests on one connection until either side is done; never raises."""
    client = Client(stream, endpoint.config)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client.run_reader)
            await _serve_requests(endpoint, client)
            nursery.cancel_scope.cancel()
        if client.linger_wanted:
            await client.linger()  # answered early: let the client read the answer
    except Exception:
        log.exception("bug on a client connection; closing it")
    finally:
        await trio.aclose_forcefully(stream)


async def _serve_requests(endpoint: Endpoint, client: Client) -> None:
    try:
        while True:
            request = await client.read_head()
            if request is None:
                return
            await handle_request(endpoint, client, request)
            if not client.keep_alive():
                return
            client.conn.start_next_cycle()
    except (Abort, ClientGone, trio.BrokenResourceError, trio.ClosedResourceError):
        client.linger_wanted = False
