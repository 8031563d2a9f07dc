"""What the endpoint answers on each path; everything else is forwarded to a lane.

:func:`handle_request` is the one place a request's outcome is decided: an
:class:`ApiError` becomes a typed JSON answer, a bug becomes a logged 500 (never a
traceback to the client), and a response cut short closes the connection. It is written
once for both kinds of connection (:class:`ClientConnection`: the fast path and h11).
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable

import trio

from ddsup.endpoint._config import EndpointConfig
from ddsup.endpoint._connection import Abort, ClientConnection, ClientGone, Request
from ddsup.endpoint._deadlines import Deadlines
from ddsup.endpoint._errors import (
    ApiError,
    bad_request,
    internal_error,
    method_not_allowed,
    no_ready_lane,
    not_found,
    overloaded,
    unauthorized,
    unknown_model,
)
from ddsup.endpoint._lanes import LaneTable
from ddsup.endpoint._metrics import Metrics
from ddsup.endpoint._proxy import Forward, Proxy

log = logging.getLogger("ddsup.endpoint")

PROXIED = frozenset({b"/v1/completions", b"/v1/chat/completions", b"/v1/embeddings"})
JSON = (b"content-type", b"application/json")
TEXT = (b"content-type", b"text/plain; version=0.0.4; charset=utf-8")


class Endpoint:
    """The state shared by every connection of one server (one worker process).

    ``render_metrics`` renders ``GET /metrics``; a worker of several replaces it with
    one that asks its parent for the totals over all workers (:mod:`._worker`).
    """

    def __init__(self, config: EndpointConfig, lanes: LaneTable) -> None:
        self.config = config
        self.lanes = lanes
        self.metrics = Metrics()
        self.deadlines = Deadlines(
            config.client_idle_timeout, config.client_header_timeout, config.upstream_timeout
        )
        self.proxy = Proxy(config, lanes, self.metrics, self.deadlines)
        self.render_metrics: Callable[[], Awaitable[bytes]] = self._render_own_metrics
        self._key = None if config.api_key is None else config.api_key.encode()

    async def _render_own_metrics(self) -> bytes:
        await trio.lowlevel.checkpoint()
        now = time.monotonic()
        stale = self.config.metrics_stale_after
        return self.metrics.render(self.lanes, now, stale, [(0, os.getpid())])

    def authorized(self, request: Request) -> bool:
        """``Authorization: Bearer <key>`` (scheme case-insensitive, key compared in constant time)."""
        if self._key is None:
            return True
        for name, value in request.headers:
            if name == b"authorization":
                scheme, _, token = value.partition(b" ")
                return scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self._key)
        return False


async def handle_request(ep: Endpoint, client: ClientConnection, request: Request) -> None:
    """Answer one request on ``client``, whatever happens (short of the client leaving)."""
    try:
        await _route(ep, client, request)
    except ApiError as err:
        await client.reject(err)
    except (Abort, ClientGone):
        raise
    except Exception:
        log.exception("bug while serving %s %s", request.method.decode(), request.path.decode())
        await client.reject(internal_error())  # still framed; if it cannot be: Abort
    await client.flush()  # a forwarded answer's end (see _proxy's docstring)


async def _route(ep: Endpoint, client: ClientConnection, request: Request) -> None:
    path = request.path
    method = request.method
    if path in PROXIED:
        if method != b"POST":
            raise method_not_allowed(method.decode(), path.decode())
        await _proxied(ep, client, request)
        return
    if path not in (b"/v1/models", b"/health", b"/metrics"):
        raise not_found(path.decode(errors="replace"))
    if method != b"GET":
        raise method_not_allowed(method.decode(), path.decode())
    client.take_bodiless_end()
    if path == b"/v1/models":
        if not ep.authorized(request):
            raise unauthorized()
        data = [
            {"id": m, "object": "model", "created": 0, "owned_by": "ddsup"}
            for m in ep.lanes.ready_models()
        ]
        await client.respond(200, [JSON], json.dumps({"object": "list", "data": data}).encode())
    elif path == b"/health":
        await _health(ep, client)
    else:
        await client.respond(200, [TEXT], await ep.render_metrics())


async def _health(ep: Endpoint, client: ClientConnection) -> None:
    known = ep.lanes.known_models()
    ready = {m: len(ep.lanes.ready(m)) for m in known}
    missing = [m for m in known if not ready[m]]
    healthy = bool(known) and not missing
    body = {"status": "ok" if healthy else "unavailable", "ready_lanes": ready, "missing": missing}
    await client.respond(200 if healthy else 503, [JSON], json.dumps(body).encode())


async def _proxied(ep: Endpoint, client: ClientConnection, request: Request) -> None:
    if not ep.authorized(request):
        raise unauthorized()
    lanes = ep.lanes
    if lanes.active() >= ep.config.max_concurrent:
        ep.metrics.rejected[("", "max_concurrent")] += 1
        ep.metrics.series.refused("", 429)  # [series hook]
        why = f"{ep.config.max_concurrent} requests in flight"
        raise overloaded(None, ep.config.retry_after, why)
    lanes.begin_request()
    start = time.monotonic()
    model, status = "", 500
    try:
        body = await client.read_body(request, ep.config.max_body_bytes)
        model = _model_of(body)
        if not ep.lanes.is_known(model):
            wanted, model = model, "(unknown)"  # one label, whatever clients send
            raise unknown_model(wanted, ep.lanes.known_models())
        if not ep.lanes.ready(model):
            raise no_ready_lane(model)
        forward = Forward.of(request, body)
        status = await _watched(ep, client, forward, model)
    except ApiError as err:
        status = err.status
        ep.metrics.series.refused(model, status)  # [series hook]
        raise
    except ClientGone:
        status = 499  # nginx's "client closed request"
        raise
    finally:
        lanes.end_request()
        ep.metrics.observe(model, status, time.monotonic() - start)


async def _watched(ep: Endpoint, client: ClientConnection, forward: Forward, model: str) -> int:
    """Forward while watching the client: if it hangs up, the lane's request is cancelled.

    A fast-path client is watched by the upstream connection itself (its ``hangup_fd``).
    """
    if client.hangup_fd is not None:
        return await ep.proxy.forward(client, forward, model)
    scope = trio.CancelScope()
    client.watch(scope)
    try:
        with scope:
            return await ep.proxy.forward(client, forward, model)
    finally:
        client.watch(None)
    raise ClientGone("the client hung up")


def _model_of(body: bytes) -> str:
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError) as err:
        raise bad_request(f"the body is not valid JSON: {err}") from err
    if not isinstance(payload, dict):
        raise bad_request("the body must be a JSON object")
    model = payload.get("model")
    if not isinstance(model, str) or not model:
        raise bad_request('the body has no "model" (a non-empty string)')
    return model
