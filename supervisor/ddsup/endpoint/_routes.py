"""What the endpoint answers on each path; everything else is forwarded to a lane.

:func:`handle_request` is the one place a request's outcome is decided: an
:class:`ApiError` becomes a typed JSON answer, a bug becomes a logged 500 (never a
traceback to the client), and a response cut short closes the connection. It is written
against :class:`ClientConnection`.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable

import trio

from ddsup.endpoint._api_errors import (
    ApiError,
    bad_request,
    internal_error,
    method_not_allowed,
    no_lane_answered,
    no_ready_lane,
    not_found,
    overloaded,
    retry_after_header,
    unauthorized,
    unknown_model,
)
from ddsup.endpoint._body_budget import BodyAccount, BodyBudget, OverBudget
from ddsup.endpoint._config import EndpointConfig
from ddsup.endpoint._connection import Abort, ClientConnection, ClientGone, Request
from ddsup.endpoint._deadlines import Deadlines
from ddsup.endpoint._hangups import Hangups
from ddsup.endpoint._lanes import LaneTable
from ddsup.endpoint._metrics import Metrics
from ddsup.endpoint._model_field import RequestBody, json_request, model_of_form
from ddsup.endpoint._notices import NOTICES
from ddsup.endpoint._proxy import Forward, Proxy
from ddsup.endpoint._route_table import FORM_ROUTES, GET_ROUTES, METHODS, MODEL_ROUTES

log = logging.getLogger("ddsup.endpoint")

JSON = (b"content-type", b"application/json")
TEXT = (b"content-type", b"text/plain; version=0.0.4; charset=utf-8")
PING_BODY_LIMIT = 4096  # a POST /ping (SageMaker's) carries no body worth reading


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
        self.hangups = Hangups()
        self.proxy = Proxy(config, lanes, self.metrics, self.deadlines)
        self.bodies = BodyBudget(config.max_buffered_bytes, _address_share(config))
        self.metrics.bodies = self.bodies
        if self.proxy.slots is not None:
            self.metrics.waiting_now = self.proxy.slots.counts
        self.open_routes = frozenset(route.encode() for route in config.open_routes)
        self.render_metrics: Callable[[], Awaitable[bytes]] = self._render_own_metrics
        self._key = None if config.api_key is None else config.api_key.encode()
        self.started = int(time.time())  # the ``created`` of the model cards

    async def _render_own_metrics(self) -> bytes:
        await trio.lowlevel.checkpoint()
        now = time.monotonic()
        stale = self.config.metrics_stale_after
        return self.metrics.render(self.lanes, now, stale, [(0, os.getpid())])

    def authorized(self, request: Request) -> bool:
        """Whether ``request`` may use its path: an open route, or the right bearer token.

        ``Authorization: Bearer <key>``: scheme case-insensitive, key compared in constant
        time. Without a configured key every route is open.
        """
        if self._key is None or request.path in self.open_routes:
            return True
        for name, value in request.headers:
            if name == b"authorization":
                scheme, _, token = value.partition(b" ")
                return scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self._key)
        return False


async def handle_request(ep: Endpoint, client: ClientConnection, request: Request) -> None:
    """Answer one request on ``client``, whatever happens (short of the client leaving)."""
    try:
        if request.path in MODEL_ROUTES and request.method == b"POST" and ep.authorized(request):
            await _proxied(ep, client, request)  # most requests: one coroutine less
        else:
            await _route(ep, client, request)
    except ApiError as err:
        await client.reject(err)
    except (Abort, ClientGone):
        raise
    except Exception:
        what = f"{request.method.decode()} {request.path.decode(errors='replace')}"
        NOTICES.note("bug", logging.ERROR, f"bug while serving {what}", exc_info=True)
        await client.reject(internal_error())  # still framed; if it cannot be: Abort
    await client.flush()  # a forwarded answer's end (see _proxy's docstring)


async def _route(ep: Endpoint, client: ClientConnection, request: Request) -> None:
    path = request.path
    method = request.method
    if path in MODEL_ROUTES:
        if method != b"POST":
            raise method_not_allowed(method.decode(), path.decode(), "POST")
        if not ep.authorized(request):
            raise unauthorized()
        await _proxied(ep, client, request)
        return
    if path not in GET_ROUTES:
        raise not_found(path.decode(errors="replace"))
    if method not in METHODS.get(path, (b"GET", b"HEAD")):  # HEAD: GET's head, no body
        allow = b", ".join(METHODS.get(path, (b"GET", b"HEAD"))).decode()
        raise method_not_allowed(method.decode(), path.decode(), allow)
    if not ep.authorized(request):
        raise unauthorized()
    if method == b"POST":
        account = ep.bodies.account(client.peer)
        try:  # a SageMaker ping's body, unread by vLLM's /ping too
            await _read_body(ep, client, request, account, PING_BODY_LIMIT)
        finally:
            account.release()
    if path == b"/v1/models":
        await client.respond(200, [JSON], _model_list(ep))
    elif path in (b"/health", b"/ping"):
        await _health(ep, client)
    elif path == b"/version":
        await _lane_version(ep, client, request)
    else:
        await client.respond(200, [TEXT], await ep.render_metrics())


def _model_list(ep: Endpoint) -> bytes:
    """vLLM's ``ModelList`` of every name a ready lane answers to.

    The members a lane's own card has and the endpoint does not keep (``root``,
    ``max_model_len``) are null, as vLLM's own cards allow; ``created`` is when the
    endpoint started.
    """
    data: list[dict[str, object]] = [
        {"id": name, "object": "model", "created": ep.started, "owned_by": "vllm",
         "root": None, "parent": None, "max_model_len": None, "permission": []}
        for name in ep.lanes.ready_names()
    ]  # fmt: skip
    return json.dumps({"object": "list", "data": data}).encode()


async def _lane_version(ep: Endpoint, client: ClientConnection, request: Request) -> None:
    """``/version`` forwarded to a ready lane (of the first model that has one): the
    lanes' vLLM version, with the retries and bounds of any forwarded request."""
    lanes = ep.lanes
    model = next((m for m in lanes.known_models() if lanes.ready(m)), None)
    if model is None:
        raise no_lane_answered("/version", ep.config.retry_after)
    lanes.begin_request()
    try:
        await ep.proxy.forward(client, Forward(request, b""), model)
    finally:
        lanes.end_request()


async def _health(ep: Endpoint, client: ClientConnection) -> None:
    known = ep.lanes.known_models()
    ready = {m: len(ep.lanes.ready(m)) for m in known}
    missing = [m for m in known if not ready[m]]
    learning = ep.lanes.learning()  # lanes whose served names are not known yet
    healthy = bool(known) and not missing and not learning
    body: dict[str, object] = {
        "status": "ok" if healthy else "unavailable",
        "ready_lanes": ready,
        "missing": missing,
    }
    if learning:
        body["learning_names"] = learning
    if healthy:
        await client.respond(200, [JSON], json.dumps(body).encode())
        return
    retry = retry_after_header(ep.config.retry_after)  # every 503 says when to ask again
    await client.respond(503, [JSON, retry], json.dumps(body).encode())


async def _proxied(ep: Endpoint, client: ClientConnection, request: Request) -> None:
    """Read the body, find its model, forward it; count it however it ends.

    A request counts towards ``max_concurrent`` only once its body is read: a client
    that sends its body slowly holds a connection (bounded by ``max_connections`` and
    ``client_body_timeout``) and the bytes it has sent (bounded by ``max_buffered_bytes``
    and its address's share, see :mod:`._body_budget`), but never a slot that others need.
    """
    lanes = ep.lanes
    start = time.monotonic()
    model, status, counted = "", 500, False
    account = ep.bodies.account(client.peer)
    try:
        _admit(ep)  # before the body too: no point reading what would be refused
        body = await _read_body(ep, client, request, account)
        wanted, payload = _requested(ep, request, body)
        if not lanes.is_known(wanted):
            model = "(unknown)"  # one label, whatever clients send
            raise unknown_model(wanted, lanes.known_names())
        model = wanted
        if not lanes.ready(model):
            raise no_ready_lane(model, ep.config.retry_after)
        _admit(ep)
        lanes.begin_request()
        counted = True
        forward = Forward(request, body)
        forward.prefix = ep.proxy.prefix_of(model, payload)
        status = await ep.proxy.forward(client, forward, model)
    except ApiError as err:
        status = err.status
        ep.metrics.series.refused(model, status)  # [series hook]
        raise
    except ClientGone:
        status = 499  # nginx's "client closed request"
        raise
    finally:
        if counted:
            lanes.end_request()
        account.release()
        ep.metrics.observe(model, status, time.monotonic() - start)


def _admit(ep: Endpoint) -> None:
    """Refuse with 429 while ``max_concurrent`` requests are in flight."""
    if ep.lanes.active() >= ep.config.max_concurrent:
        ep.metrics.rejected[("", "max_concurrent")] += 1
        why = f"{ep.config.max_concurrent} requests in flight"
        raise overloaded(None, ep.config.retry_after, why)


async def _read_body(
    ep: Endpoint,
    client: ClientConnection,
    request: Request,
    account: BodyAccount,
    limit: int | None = None,
) -> bytes:
    """The body, charged to the process's budget as it arrives (429 when it does not fit:
    the rest is not read, and the connection ends after the answer); at most ``limit``
    bytes (default ``max_body_bytes``: 413 beyond)."""
    limit = ep.config.max_body_bytes if limit is None else limit
    try:
        return await client.read_body(request, limit, account)
    except OverBudget as err:
        ep.metrics.rejected[("", "body_memory")] += 1
        raise overloaded(None, ep.config.retry_after, str(err)) from None


def _address_share(config: EndpointConfig) -> int:
    """Bytes of bodies still arriving that one client address may hold: a quarter of
    the budget, and at least one whole body."""
    return max(config.max_body_bytes, config.max_buffered_bytes // 4)


def _requested(ep: Endpoint, request: Request, body: bytes) -> tuple[str, RequestBody | None]:
    """The name the request asks for (its model, or the one model the endpoint serves)
    and its JSON body's object (``None``: a form)."""
    payload = None
    if request.path in FORM_ROUTES:
        content_type = next((v for n, v in request.headers if n == b"content-type"), b"")
        wanted = model_of_form(body, content_type)
    else:
        wanted, payload = _model_of(body)
    if wanted is not None:
        return wanted, payload
    models = ep.lanes.known_models()
    if len(models) != 1:
        served = ", ".join(models) or "none"
        raise bad_request(f'the request names no "model"; this endpoint serves: {served}')
    return models[0], payload


def _model_of(body: bytes) -> tuple[str | None, RequestBody]:
    """The JSON body's model and object (a seam the tests use to plant a bug)."""
    return json_request(body)
