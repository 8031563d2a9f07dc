"""The logical endpoint: an OpenAI-compatible router in front of the lanes (docs/cli.md, `ddsup endpoint`).

Layers, bottom up: ``_api_errors`` (typed JSON refusals), ``_notices`` (log lines a client
can cause, rate-limited), ``_body_budget`` (request bodies in memory), ``_config``,
``_connection`` (what routes and proxy see of a client connection), ``_wire`` (raw
non-blocking sockets), ``_http1`` (lane responses: heads and body framing),
``_upstream`` (pooled connections to a lane, hang-up watch), ``_shared_counts``
(requests in flight, counted by every worker), ``_lanes`` (the live lane table and each
lane's load), ``_admission`` (which lane gets a request by load), ``_prefix_routing``
(prefix-aware routing over it), ``_lane_slots`` (requests that wait for a lane's free
slot under ``max_in_flight_per_lane``), ``_prefix_cache`` (the lanes' own prefix-cache counters),
``_metrics`` and ``_metrics_sampler``, ``_head_fields`` and ``_client`` (one client
connection: httptools parses every request),
``_proxy`` (forwarding, retries, streaming relay), ``_routes``, ``_worker_link`` (parent
↔ worker messages), ``_workers`` (the parent of several workers), ``_server``
(listeners, connection tasks, one or several workers), ``_worker`` (one worker process),
``_endpoint_command`` (the ``ddsup endpoint`` command).
"""

from __future__ import annotations

from ddsup.endpoint._config import EndpointConfig as EndpointConfig
from ddsup.endpoint._endpoint_command import configure_endpoint as configure_endpoint
from ddsup.endpoint._endpoint_command import run_endpoint as run_endpoint
from ddsup.endpoint._endpoint_command import serve as serve
from ddsup.endpoint._lanes import LaneInfo as LaneInfo
from ddsup.endpoint._lanes import LaneTable as LaneTable
from ddsup.endpoint._server import Serving as Serving
from ddsup.endpoint._server import open_endpoint as open_endpoint
from ddsup.endpoint._server import serve_endpoint as serve_endpoint

__all__ = [
    "EndpointConfig",
    "LaneInfo",
    "LaneTable",
    "Serving",
    "configure_endpoint",
    "open_endpoint",
    "run_endpoint",
    "serve",
    "serve_endpoint",
]
