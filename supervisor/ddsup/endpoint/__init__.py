"""The logical endpoint: an OpenAI-compatible router in front of the lanes (docs/cli.md, `ddsup endpoint`).

Layers, bottom up: ``_errors`` (typed JSON refusals), ``_config``, ``_upstream``
(pooled h11 connections to a lane), ``_lanes`` (the live lane table and each lane's
load), ``_admission`` (which lane gets a request), ``_metrics`` and
``_metrics_sampler``, ``_client`` (one client connection: h11 plus our limits),
``_proxy`` (forwarding, retries, streaming relay), ``_routes``, ``_server`` (listeners
and connection tasks), ``_commands`` (the ``ddsup endpoint`` command).
"""

from __future__ import annotations

from ddsup.endpoint._commands import configure_endpoint as configure_endpoint
from ddsup.endpoint._commands import run_endpoint as run_endpoint
from ddsup.endpoint._commands import serve as serve
from ddsup.endpoint._config import EndpointConfig as EndpointConfig
from ddsup.endpoint._lanes import LaneInfo as LaneInfo
from ddsup.endpoint._lanes import LaneTable as LaneTable
from ddsup.endpoint._server import serve_endpoint as serve_endpoint

__all__ = [
    "EndpointConfig",
    "LaneInfo",
    "LaneTable",
    "configure_endpoint",
    "run_endpoint",
    "serve",
    "serve_endpoint",
]
