"""Forwarding one request to a lane, with retries on other lanes and streamed relays.

A request is tried on up to ``1 + retries`` distinct lanes, but only while nothing of
the response has gone to the client: once the response head is queued, the lane's
answer is the client's answer, and a lane that dies mid-stream cuts the client's
response short (:class:`Abort`) rather than restarting it elsewhere, which would
duplicate tokens. Bodies are relayed one socket read at a time, and each read is
flushed to the client before the next, so a slow client slows the lane's reads
(backpressure) and buffering stays bounded by one read. An HTTP/1.1 client takes a
chunked body (SSE) as the lane framed it: each read passes on as it came, with no
per-event decoding and framing again (:meth:`BodyDecoder.scan`).

The last bytes of a response stay queued when :meth:`Proxy.forward` returns: the caller
records the request in the metrics first and then flushes, so a client that has its
answer finds it counted in the next ``/metrics`` scrape.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import trio

from ddsup.endpoint._admission import Admission
from ddsup.endpoint._api_errors import no_ready_lane, overloaded, upstream_failed
from ddsup.endpoint._config import EndpointConfig
from ddsup.endpoint._connection import (
    CHUNKED,
    LENGTH,
    Abort,
    ClientConnection,
    ClientGone,
    Request,
)
from ddsup.endpoint._deadlines import Deadlines, Expired
from ddsup.endpoint._ejection import Ejection
from ddsup.endpoint._http1 import ProtocolError, ResponseHead, retry_after
from ddsup.endpoint._lane_slots import LaneSlots, NoLane
from ddsup.endpoint._lanes import LaneState, LaneTable
from ddsup.endpoint._metrics import Metrics
from ddsup.endpoint._prefix_routing import PrefixIndex, PrefixPolicy, PrefixRouter, prompt_keys
from ddsup.endpoint._timeseries import NO_SERIES  # [series hook]
from ddsup.endpoint._upstream import (
    ConnectionPool,
    UpstreamConnection,
    UpstreamError,
    request_bytes,
)
from ddsup.endpoint._wire import RECEIVE_SIZE
from ddsup.record import CUT
from ddsup.units import Routing

log = logging.getLogger("ddsup.endpoint")

# A lane's answers that another lane may serve better. 500 among them: vLLM answers it to
# every request while its engine is dead, until its API server exits (seconds later).
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
HOP_BY_HOP = frozenset(
    {b"connection", b"keep-alive", b"transfer-encoding", b"te", b"trailer", b"upgrade"}
)
# Host and Content-Length are written anew; Authorization is the client's key for the
# endpoint, never for a lane (a lane gets its own: ``ConnectionPool.auth``).
REQUEST_DROP = HOP_BY_HOP | {b"host", b"content-length", b"expect", b"authorization"}


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


def _start_response(client: ClientConnection, head: ResponseHead, conn: UpstreamConnection) -> None:
    """Queue the lane's response head as the client gets it; ``ValueError`` if it cannot.

    A verbatim (HTTP/1.1) client takes a head of end-to-end headers as it came, when the
    body's framing passes on unchanged too (Content-Length, or chunked).
    """
    assert conn.decoder is not None
    framing = conn.decoder.framing
    if client.verbatim and head.end_to_end and framing in (LENGTH, CHUNKED):
        client.pass_head(head.raw)
        return
    drop = HOP_BY_HOP if framing is LENGTH else HOP_BY_HOP | {b"content-length"}
    headers = end_to_end(head.headers, drop)
    client.start_response(head.status, head.reason, headers, framing or LENGTH)


class Forward:
    """What goes to the lane: the client's request with end-to-end headers only.

    ``headers`` is the block of header lines (``name: value`` and CRLF each), Host and
    Content-Length excepted. ``prefix``: the keys of its prompt, for prefix-aware
    routing (:func:`~._prefix_routing.prompt_keys`; empty: routed by load alone). A
    slotted class rather than a frozen dataclass: one is built per proxied request.
    """

    __slots__ = ("body", "headers", "method", "prefix", "target")

    def __init__(self, request: Request, body: bytes) -> None:
        headers = request.forwarded
        if headers is None:
            kept = end_to_end(request.headers, REQUEST_DROP)
            headers = b"".join(b"%s: %s\r\n" % pair for pair in kept)
        self.method = request.method
        self.target = request.target
        self.headers = headers
        self.body = body
        self.prefix: Sequence[int] = ()


@dataclass(frozen=True)
class Failure:
    """One failed attempt on one lane; ``status`` when the lane answered (429 or a 5xx),
    and the seconds its ``Retry-After`` asked for, if it did."""

    kind: str
    detail: str
    status: int | None = None
    retry_after: float | None = None


class Proxy:
    """The forwarding policy over a lane table: choice, retries, relay."""

    def __init__(
        self,
        config: EndpointConfig,
        lanes: LaneTable,
        metrics: Metrics,
        deadlines: Deadlines,
    ) -> None:
        self.config = config
        self.lanes = lanes
        self.metrics = metrics
        self.deadlines = deadlines
        self.ejection = Ejection(config.eject_after, config.eject_for, metrics)
        self.admission = Admission(lanes)
        # a lane has room while its queue is under the limit: with a bound on what it is
        # sent at once, while it has a free slot (else the request waits for one)
        self.limit = config.max_queue_per_lane
        if config.max_in_flight_per_lane:
            self.limit = min(self.limit, config.max_in_flight_per_lane)
        self.prefixes: PrefixRouter | None = None  # routing = "prefix"
        if config.routing is Routing.PREFIX:
            policy = PrefixPolicy(
                config.prefix_min_match,
                config.prefix_balance_requests,
                config.prefix_balance_ratio,
            )
            index = PrefixIndex(config.prefix_index_blocks, config.prefix_max_age)
            self.prefixes = PrefixRouter(
                lanes, policy, index, limit=self.limit, stale_after=config.metrics_stale_after
            )
        self.slots: LaneSlots | None = None
        if config.max_in_flight_per_lane:
            self.slots = LaneSlots(
                lanes,
                self.admission,
                deadlines,
                self.prefixes,
                limit=self.limit,
                stale_after=config.metrics_stale_after,
            )

    def prefix_of(self, model: str, payload: Mapping[str, Any] | None) -> Sequence[int]:
        """The keys prefix-aware routing chooses ``payload``'s lane by (none: by load,
        which is also the choice while the model has one lane)."""
        if self.prefixes is None or payload is None or len(self.lanes.ready(model)) < 2:
            return ()
        return prompt_keys(payload, model)

    async def forward(self, client: ClientConnection, request: Forward, model: str) -> int:
        """Serve ``request`` from a lane of ``model``; the status sent, or an :class:`ApiError`."""
        config = self.config
        tried: list[str] = []
        failures: list[Failure] = []
        full = False  # untried lanes are left, but none has room
        for attempt in range(config.retries + 1):
            now = time.monotonic()
            lane = self.admission.choose(
                model,
                tried,
                limit=self.limit,
                now=now,
                stale_after=config.metrics_stale_after,
                turn=self.lanes.next_turn(model),
            )
            how: str | None = None
            if self.slots is not None and (lane is None or model in self.slots.waiting):
                if len(tried) >= len(self.lanes.ready(model)):
                    break
                lane, how = await self._wait_for_slot(client, request, model, tried)
            elif lane is None:
                full = len(tried) < len(self.lanes.ready(model))
                break
            else:
                if request.prefix and self.prefixes is not None:
                    lane, how = self.prefixes.choose(model, lane, request.prefix, tried, now)
                lane.begin()
            if how is not None:
                self.metrics.prefix_routed[(model, how)] += 1
            if attempt:
                self.metrics.retries[model] += 1
            tried.append(lane.info.instance)
            result = await self._attempt(client, lane, request)
            if isinstance(result, int):
                return result
            failures.append(result)
            self.metrics.upstream_errors[(lane.info.instance, result.kind)] += 1
        raise self._refusal(model, tried, failures, full)

    async def _wait_for_slot(
        self, client: ClientConnection, request: Forward, model: str, tried: list[str]
    ) -> tuple[LaneState, str | None]:
        """A lane of ``model`` with a free slot, counted in flight, once one has one
        (:mod:`._lane_slots`), and why it was chosen; 429 when too many wait already or
        none has a slot within ``upstream_timeout``, 503 when the model's lanes all left."""
        slots = self.slots
        assert slots is not None
        config = self.config
        lanes = self.lanes.ready(model)
        room = config.max_queue_per_lane * len(lanes) - sum(lane.outstanding for lane in lanes)
        if len(slots.waiting.get(model, ())) >= room:
            self.metrics.rejected[(model, "queue_full")] += 1
            why = f"{config.max_queue_per_lane} queued per lane"
            raise overloaded(model, config.retry_after, why)
        deadline = time.monotonic() + config.upstream_timeout
        try:
            return await slots.wait(model, request.prefix, tuple(tried), client.hangup, deadline)
        except NoLane:
            raise no_ready_lane(model, config.retry_after) from None
        except Expired:
            self.metrics.rejected[(model, "slot_timeout")] += 1
            why = f"no lane had a free slot within {config.upstream_timeout:g} s"
            raise overloaded(model, config.retry_after, why) from None

    def _refusal(
        self, model: str, tried: list[str], failures: list[Failure], full: bool
    ) -> Exception:
        """Why no lane answered: 503 when none is ready, 429 when a lane said it is at
        capacity or the rest had no room (a client backs off and comes back, rather than
        spend its retries on a lane that refused a connection), else 502."""
        config = self.config
        if not tried and not self.lanes.ready(model):
            return no_ready_lane(model, config.retry_after)
        busy = [f for f in failures if f.status == 429]
        if busy or full:
            self.metrics.rejected[(model, "queue_full")] += 1
            why = "lanes answered 429" if busy else f"{config.max_queue_per_lane} queued per lane"
            asked = [f.retry_after for f in busy if f.retry_after is not None]
            return overloaded(model, max([config.retry_after, *asked]), why)
        attempts = [f"{name}: {f.detail}" for name, f in zip(tried, failures, strict=True)]
        return upstream_failed(model, attempts)

    async def _attempt(
        self, client: ClientConnection, lane: LaneState, request: Forward
    ) -> int | Failure:
        """One try on ``lane``: the status relayed, or why it failed before any byte went
        to the client. Either way the lane's record (:mod:`._ejection`) learns of it.
        The request is counted in flight on ``lane`` already; it ends here."""
        self.metrics.series.started(lane.info.instance)  # [series hook]
        delivered = 0  # [series hook] the status relayed whole; 0 while none
        try:
            try:
                conn, response = await self._open(lane.pool, request, client)
            except UpstreamError as err:
                log.debug("lane %s: %s", lane.info.instance, err)
                self.ejection.failed(lane, str(err))
                return Failure(err.kind, str(err))
            code = response.status
            if code in RETRY_STATUSES:
                conn.close_now()
                self._judge(lane, code)
                asked = retry_after(response.headers) if code == 429 else None
                return Failure(f"http {code}", f"answered {code}", code, asked)
            try:
                _start_response(client, response, conn)
            except ValueError as err:  # a head that cannot be passed on to the client
                conn.close_now()
                self.ejection.failed(lane, f"unusable response head ({err})")
                return Failure("protocol", f"unusable response head ({err})")
            try:
                await self._relay(conn, client, lane)
            except Abort as err:  # the lane cut its answer short
                conn.close_now()
                self.ejection.failed(lane, str(err))
                raise
            except BaseException:
                conn.close_now()
                raise
            lane.pool.release(conn)
            client.last_upstream = conn
            self._judge(lane, code)
            delivered = code  # [series hook]
            return code
        except (ClientGone, trio.Cancelled):
            delivered = CUT  # [series hook] the client left, or the endpoint stops: not the lane
            raise
        finally:
            lane.end()
            if self.slots is not None and self.slots.waiting:
                self.slots.freed(lane)
            self.metrics.series.finished(lane.info.instance, delivered)  # [series hook]

    def _judge(self, lane: LaneState, status: int) -> None:
        """A lane's answer: a 5xx is a failure (:mod:`._ejection`), anything else not."""
        if status >= 500:
            self.ejection.failed(lane, f"answered {status}")
        else:
            self.ejection.succeeded(lane)

    async def _open(
        self, pool: ConnectionPool, request: Forward, client: ClientConnection
    ) -> tuple[UpstreamConnection, ResponseHead]:
        """Send ``request`` and read the response head, on a fresh connection if a kept one
        died; :class:`UpstreamError` when the lane fails before answering.

        The client's hang-up (its ``hangup``) ends the connection's waits.
        """
        hangup = client.hangup
        config = self.config
        conn = await pool.acquire(config.upstream_connect_timeout, client.last_upstream)
        data = request_bytes(
            request.method,
            request.target,
            pool.host_header,
            request.headers,
            request.body,
            pool.auth,
        )
        for last in (False, True):
            conn.checkout(self.deadlines, hangup)
            conn.deadline = time.monotonic() + config.upstream_timeout
            try:
                await conn.send(data)
                return conn, await conn.read_head()
            except Expired as err:
                conn.close_now()
                why = f"no answer within {config.upstream_timeout:g} s"
                raise UpstreamError("timeout", why) from err
            except (OSError, ProtocolError) as err:
                conn.close_now()
                if last or not conn.reused:
                    why = f"connection broken before answering ({err})"
                    raise UpstreamError("reset", why) from err
            except UpstreamError:
                conn.close_now()
                if last or not conn.reused:
                    raise
            except BaseException:
                conn.close_now()
                raise
            conn = await pool.connect(config.upstream_connect_timeout)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _relay(
        self, conn: UpstreamConnection, client: ClientConnection, lane: LaneState
    ) -> None:
        """Pass the body on; its end stays queued (see the module docstring).

        Per read of a stream: one wait (``next_bytes``'s, written out), one send (``relay``),
        and the silence deadline moved on by assignment (:class:`~._deadlines.Timed`).
        """
        if not self._pass_buffered(conn, client, lane):
            decoder = conn.decoder
            assert decoder is not None
            take = decoder.scan if client.verbatim else decoder.feed
            series = self.metrics.series  # [series hook]
            counting = series is not NO_SERIES  # [series hook] else no call per read
            timeout = self.config.upstream_timeout
            monotonic = time.monotonic
            relay = client.relay
            sock = conn.wire.sock
            if not client.flush_now():
                await client.flush()  # untimed: a slow client is not a silent lane
            while True:
                conn.deadline = monotonic() + timeout
                try:
                    while True:  # no coroutine per read of a stream
                        if conn.interrupted is not None:
                            conn.raise_interruption()
                        conn.waiting_on = sock  # a stream's next event comes later
                        try:
                            await trio.lowlevel.wait_readable(sock)
                        except trio.ClosedResourceError:
                            conn.raise_interruption()
                            raise
                        finally:
                            conn.waiting_on = None
                        try:
                            data = sock.recv(RECEIVE_SIZE)
                        except BlockingIOError:
                            continue
                        break
                    if not data:
                        conn.at_eof()
                except Expired as err:
                    raise self._cut(lane, f"silent for {timeout:g} s mid-response") from err
                except (OSError, ProtocolError) as err:
                    raise self._cut(lane, f"response cut short ({err})") from err
                before = decoder.payload  # [series hook]
                try:
                    data = take(data)
                except ProtocolError as err:
                    raise self._cut(lane, f"bad response body ({err})") from err
                if data:
                    if decoder.done:  # the end stays queued (see the module docstring)
                        client.send_body(data)
                    elif not relay(data):
                        await client.flush()  # untimed, as above
                    if counting:  # [series hook]
                        series.sent(lane.info.instance, decoder.payload - before)
                if decoder.done:
                    break
        client.end_response()

    def _pass_buffered(
        self, conn: UpstreamConnection, client: ClientConnection, lane: LaneState
    ) -> bool:
        """Queue the body bytes received so far for the client; ``True`` at the body's end."""
        decoder = conn.decoder
        assert decoder is not None
        before = decoder.payload  # [series hook] body bytes, whichever framing the client gets
        try:
            data = conn.buffered(client.verbatim)
        except ProtocolError as err:
            raise self._cut(lane, f"bad response body ({err})") from err
        if data:
            client.send_body(data)
            self.metrics.series.sent(lane.info.instance, decoder.payload - before)  # [series hook]
        return decoder.done

    def _cut(self, lane: LaneState, why: str) -> Abort:
        log.warning("lane %s: %s; the client's response is cut short", lane.info.instance, why)
        self.metrics.upstream_errors[(lane.info.instance, "mid-response")] += 1
        return Abort(why)
