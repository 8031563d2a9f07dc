"""Forwarding one request to a lane, with retries on other lanes and streamed relays.

A request is tried on up to ``1 + retries`` distinct lanes, but only while nothing of
the response has gone to the client: once the response head is queued, the lane's
answer is the client's answer, and a lane that dies mid-stream cuts the client's
response short (:class:`Abort`) rather than restarting it elsewhere, which would
duplicate tokens. Bodies are relayed one socket read at a time, and each read is
flushed to the client before the next, so a slow client slows the lane's reads
(backpressure) and buffering stays bounded by one read.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass

import h11
import trio

from ddsup.endpoint._admission import choose
from ddsup.endpoint._client import Abort, Client
from ddsup.endpoint._config import EndpointConfig
from ddsup.endpoint._errors import no_ready_lane, overloaded, upstream_failed
from ddsup.endpoint._http1 import ProtocolError, ResponseHead
from ddsup.endpoint._lanes import LaneState, LaneTable
from ddsup.endpoint._metrics import Metrics
from ddsup.endpoint._upstream import (
    ConnectionPool,
    UpstreamConnection,
    UpstreamError,
    request_bytes,
)

log = logging.getLogger("ddsup.endpoint")

RETRY_STATUSES = frozenset({429, 502, 503, 504})
HOP_BY_HOP = frozenset(
    {b"connection", b"keep-alive", b"transfer-encoding", b"te", b"trailer", b"upgrade"}
)
REQUEST_DROP = HOP_BY_HOP | {b"host", b"content-length", b"expect"}


def end_to_end(
    headers: Iterable[tuple[bytes, bytes]], drop: frozenset[bytes]
) -> list[tuple[bytes, bytes]]:
    """``headers`` without hop-by-hop ones, including those a Connection header names."""
    listed: set[bytes] = set()
    for name, value in headers:
        if name == b"connection":
            listed.update(token.strip().lower() for token in value.split(b","))
    return [
        (name, value)
        for name, value in headers
        if name not in drop and name not in listed and not name.startswith(b"proxy-")
    ]


def _client_head(head: ResponseHead, conn: UpstreamConnection) -> h11.Response:
    """The lane's response head as the client gets it (h11 validates it on the way)."""
    assert conn.decoder is not None
    length_framed = conn.decoder.remaining >= 0
    drop = HOP_BY_HOP if length_framed else HOP_BY_HOP | {b"content-length"}
    headers = end_to_end(head.headers, drop)
    return h11.Response(status_code=head.status, headers=headers, reason=head.reason)


@dataclass(frozen=True)
class Forward:
    """What goes to the lane: the client's request with end-to-end headers only."""

    method: bytes
    target: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes


@dataclass(frozen=True)
class Failure:
    """One failed attempt on one lane; ``status`` when the lane answered (429/502/503/504)."""

    kind: str
    detail: str
    status: int | None = None


class Proxy:
    """The forwarding policy over a lane table: choice, retries, relay."""

    def __init__(self, config: EndpointConfig, lanes: LaneTable, metrics: Metrics) -> None:
        self.config = config
        self.lanes = lanes
        self.metrics = metrics

    async def forward(self, client: Client, request: Forward, model: str) -> int:
        """Serve ``request`` from a lane of ``model``; the status sent, or an :class:`ApiError`."""
        config = self.config
        tried: list[str] = []
        failures: list[Failure] = []
        for attempt in range(config.retries + 1):
            lane = choose(
                self.lanes.ready(model),
                tried,
                limit=config.max_queue_per_lane,
                now=trio.current_time(),
                stale_after=config.metrics_stale_after,
                turn=self.lanes.next_turn(model),
            )
            if lane is None:
                break
            if attempt:
                self.metrics.retries[model] += 1
            tried.append(lane.info.instance)
            result = await self._attempt(client, lane, request)
            if isinstance(result, int):
                return result
            failures.append(result)
            self.metrics.upstream_errors[(lane.info.instance, result.kind)] += 1
        raise self._refusal(model, tried, failures)

    def _refusal(self, model: str, tried: list[str], failures: list[Failure]) -> Exception:
        if not tried and not self.lanes.ready(model):
            return no_ready_lane(model)
        if all(f.status == 429 for f in failures):  # also true when no lane had room
            self.metrics.rejected[(model, "queue_full")] += 1
            why = (
                f"{self.config.max_queue_per_lane} queued per lane"
                if not failures
                else "lanes answered 429"
            )
            return overloaded(model, self.config.retry_after, why)
        attempts = [f"{name}: {f.detail}" for name, f in zip(tried, failures, strict=True)]
        return upstream_failed(model, attempts)

    async def _attempt(self, client: Client, lane: LaneState, request: Forward) -> int | Failure:
        lane.outstanding += 1
        self.metrics.series.started(lane.info.instance)  # [series hook]
        delivered = 0  # [series hook] the status relayed whole; 0 while none
        try:
            try:
                conn, response = await self._open(lane.pool, request)
            except UpstreamError as err:
                log.debug("lane %s: %s", lane.info.instance, err)
                return Failure(err.kind, str(err))
            if response.status in RETRY_STATUSES:
                conn.close_now()
                code = response.status
                return Failure(f"http {code}", f"answered {code}", code)
            try:
                client_head = _client_head(response, conn)
            except h11.ProtocolError as err:  # a header h11 will not pass on to the client
                conn.close_now()
                return Failure("protocol", f"unusable response head ({err})")
            try:
                await self._relay(conn, client, client_head, lane)
            except BaseException:
                conn.close_now()
                raise
            lane.pool.release(conn)
            delivered = response.status  # [series hook]
            return response.status
        finally:
            lane.outstanding -= 1
            if lane.retired and not lane.outstanding:  # the last request of a drained lane
                self.lanes.retired_idle(lane)
            self.metrics.series.finished(lane.info.instance, delivered)  # [series hook]

    async def _open(
        self, pool: ConnectionPool, request: Forward
    ) -> tuple[UpstreamConnection, ResponseHead]:
        """Send ``request`` and read the response head, on a fresh connection if a kept one died."""
        conn = await pool.acquire(self.config.upstream_connect_timeout)
        for last in (False, True):
            try:
                return conn, await self._exchange(conn, pool.host_header, request)
            except UpstreamError as err:
                conn.close_now()
                if last or not conn.reused or err.kind == "timeout":
                    raise
            except BaseException:
                conn.close_now()
                raise
            conn = await pool.connect(self.config.upstream_connect_timeout)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _exchange(
        self, conn: UpstreamConnection, host: bytes, request: Forward
    ) -> ResponseHead:
        data = request_bytes(request.method, request.target, host, request.headers, request.body)
        timeout = self.config.upstream_timeout
        try:
            with trio.fail_after(timeout):
                await conn.stream.send_all(data)
                return await conn.read_head()
        except trio.TooSlowError as err:
            raise UpstreamError("timeout", f"no answer within {timeout:g} s") from err
        except (trio.BrokenResourceError, OSError, ProtocolError) as err:
            raise UpstreamError("reset", f"connection broken before answering ({err})") from err

    async def _relay(
        self, conn: UpstreamConnection, client: Client, head: h11.Response, lane: LaneState
    ) -> None:
        client.write(head)
        if not self._pass_buffered(conn, client, lane):
            timeout = self.config.upstream_timeout
            with trio.CancelScope() as idle:  # one scope, its deadline pushed on at each read
                while True:
                    await client.flush()
                    idle.deadline = trio.current_time() + timeout
                    try:
                        await conn.receive()
                    except (trio.BrokenResourceError, ProtocolError) as err:
                        raise self._cut(lane, f"response cut short ({err})") from err
                    idle.deadline = math.inf  # a slow client is not a silent lane
                    if self._pass_buffered(conn, client, lane):
                        break
            if idle.cancelled_caught:
                raise self._cut(lane, f"silent for {timeout:g} s mid-response")
        client.write(h11.EndOfMessage())
        await client.flush()

    def _pass_buffered(self, conn: UpstreamConnection, client: Client, lane: LaneState) -> bool:
        """Queue the body bytes received so far for the client; ``True`` at the body's end."""
        try:
            data = conn.buffered()
        except ProtocolError as err:
            raise self._cut(lane, f"bad response body ({err})") from err
        if data:
            client.write(h11.Data(data=data))
            self.metrics.series.sent(lane.info.instance, len(data))  # [series hook]
        assert conn.decoder is not None
        return conn.decoder.done

    def _cut(self, lane: LaneState, why: str) -> Abort:
        log.warning("lane %s: %s; the client's response is cut short", lane.info.instance, why)
        self.metrics.upstream_errors[(lane.info.instance, "mid-response")] += 1
        return Abort(why)
