"""The endpoint's settings: one frozen value built from the ``[endpoint]`` unit section.

The unit file carries what a user tunes (port, queue limit, retries, key); the rest are
protective limits with defaults a user rarely needs to touch (slowloris timeouts, sample
freshness), kept here so tests can shrink them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ddsup.endpoint._route_table import DEFAULT_OPEN_ROUTES, ROUTES
from ddsup.units import EndpointSection, Routing

MIB = 1024 * 1024


@dataclass(frozen=True)
class EndpointConfig:
    """Everything :func:`serve_endpoint` needs besides the lane table.

    ``api_key`` is the secret itself (never logged, never in ``repr``); ``None`` means
    no authentication; ``open_routes`` are answered without it all the same. Times are
    seconds. ``workers``: processes serving the port (``None``: one per CPU this process
    may run on, see :meth:`worker_count`). ``max_connections`` and
    ``max_buffered_bytes`` bound each worker. ``eject_after`` connect errors or 5xx
    answers of a lane in a row take it out of the rotation for ``eject_for`` seconds
    (see :mod:`._ejection`; 0 turns ejection off). Each lane's ``/metrics`` is sampled
    every ``metrics_interval`` while it has requests in flight or a queue of its own, else
    every ``metrics_idle_interval`` (see :mod:`._metrics_sampler`). A fetch may take up to
    ``metrics_timeout``: vLLM renders its /metrics (~70 KB) seconds late when a burst
    starves its API server, exactly when its queue matters. A sample is used for
    ``metrics_stale_after``, longer than one fetch and one interval, so that a lane
    fetched back to back is never without one.
    ``routing`` and the ``prefix_*`` settings are prefix-aware routing's
    (:mod:`._prefix_routing`): its thresholds, and the bounds of each worker's index of
    what the lanes were sent (blocks of a prompt, and seconds a block is remembered after
    it was last sent). ``max_in_flight_per_lane`` bounds what one lane is sent at once
    (0: no bound); more requests wait in the endpoint for a free slot (:mod:`._lane_slots`).
    """

    bind: str = "127.0.0.1"
    port: int = 9000
    max_queue_per_lane: int = 128
    max_in_flight_per_lane: int = 0
    retry_after: float = 1.0
    retries: int = 2
    api_key: str | None = None
    max_body_bytes: int = 32 * MIB
    max_buffered_bytes: int = 512 * MIB
    max_concurrent: int = 4096
    max_connections: int = 8192
    max_header_bytes: int = 64 * 1024
    upstream_connect_timeout: float = 5.0
    upstream_timeout: float = 600.0
    client_header_timeout: float = 10.0
    client_body_timeout: float = 60.0
    client_idle_timeout: float = 75.0
    metrics_interval: float = 1.0
    metrics_idle_interval: float = 30.0
    metrics_timeout: float = 10.0
    metrics_stale_after: float = 12.0
    max_idle_upstream_connections: int = 256
    workers: int | None = 1
    open_routes: tuple[str, ...] = DEFAULT_OPEN_ROUTES
    eject_after: int = 5
    eject_for: float = 10.0
    routing: Routing = Routing.LEAST_LOAD
    prefix_min_match: float = 0.3
    prefix_balance_requests: int = 64
    prefix_balance_ratio: float = 1.5
    prefix_index_blocks: int = 1 << 18
    prefix_max_age: float = 600.0

    def __post_init__(self) -> None:
        if self.retries < 0 or self.max_queue_per_lane < 1 or self.max_concurrent < 1:
            raise ValueError("retries must be >= 0, max_queue_per_lane and max_concurrent >= 1")
        if self.max_in_flight_per_lane < 0:
            raise ValueError("max_in_flight_per_lane must be >= 0 (0: no bound)")
        if self.workers is not None and self.workers < 1:
            raise ValueError('workers must be >= 1 (or "auto")')
        if self.max_body_bytes < 0 or not 0 < self.metrics_interval <= 1.0:
            raise ValueError("max_body_bytes must be >= 0 and metrics_interval in (0, 1] s")
        if self.metrics_idle_interval < self.metrics_interval:
            raise ValueError("metrics_idle_interval must be >= metrics_interval")
        if self.max_buffered_bytes < self.max_body_bytes:
            raise ValueError("max_buffered_bytes must be >= max_body_bytes (one body must fit)")
        if self.max_connections < 1 or self.eject_after < 0 or self.eject_for < 0:
            raise ValueError("max_connections must be >= 1, eject_after and eject_for >= 0")
        if not 0 <= self.prefix_min_match <= 1 or self.prefix_balance_ratio < 1:
            raise ValueError("prefix_min_match must be in [0, 1], prefix_balance_ratio >= 1")
        if self.prefix_balance_requests < 0 or self.prefix_index_blocks < 2:
            raise ValueError("prefix_balance_requests must be >= 0, prefix_index_blocks >= 2")
        if not self.prefix_max_age > 0:
            raise ValueError("prefix_max_age must be > 0 s")
        unknown = [r for r in self.open_routes if r.encode() not in ROUTES]
        if unknown:
            known = ", ".join(sorted(r.decode() for r in ROUTES))
            raise ValueError(
                f"open_routes: {', '.join(unknown)} is no route of the endpoint ({known})"
            )

    def __repr__(self) -> str:
        key = "None" if self.api_key is None else "'***'"
        return f"EndpointConfig(bind={self.bind!r}, port={self.port}, api_key={key}, …)"

    @classmethod
    def from_section(cls, section: EndpointSection, api_key: str | None) -> EndpointConfig:
        """The settings of an ``[endpoint]`` unit; the caller resolves ``api_key_env``."""
        return cls(
            bind=section.bind,
            port=section.port,
            max_queue_per_lane=section.max_queue_per_lane,
            max_in_flight_per_lane=section.max_in_flight_per_lane,
            retry_after=section.retry_after,
            retries=section.retries,
            api_key=api_key,
            max_body_bytes=section.max_body_bytes,
            max_buffered_bytes=max(section.max_buffered_bytes, section.max_body_bytes),
            max_concurrent=section.max_concurrent,
            max_connections=section.max_connections,
            upstream_timeout=section.upstream_timeout,
            workers=section.workers,
            open_routes=section.open_routes,
            eject_after=section.eject_after,
            eject_for=section.eject_for,
            routing=section.routing,
            prefix_min_match=section.prefix_min_match,
            prefix_balance_requests=section.prefix_balance_requests,
            prefix_balance_ratio=section.prefix_balance_ratio,
        )

    def worker_count(self) -> int:
        """``workers``, with "auto" resolved to the CPUs this process may run on."""
        return self.workers or len(os.sched_getaffinity(0))
