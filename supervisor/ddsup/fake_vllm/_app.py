"""The ASGI application of the fake: vLLM's HTTP surface over the fake engine.

Routes (as vLLM's API server): ``GET /health`` (200, empty body; 503 when told to
fail), ``GET|POST /ping``, ``GET /version``, ``GET /v1/models`` (served names and LoRA
adapters), ``GET /metrics``, ``POST /v1/completions`` and ``POST /v1/chat/completions``
(with SSE streaming), ``POST /v1/responses`` (non-streaming), and the pooling, scoring
and tokenizer routes of :mod:`~ddsup.fake_vllm._pooling`. Every response carries
``x-fake-vllm-lane`` so a test can tell which lane answered. A client that disconnects
while its request queues or generates frees its slot at once, as vLLM aborts such
requests. With API keys, paths under ``/v1``, ``/v2``, ``/inference`` and ``/cohere``
need ``Authorization: Bearer KEY`` (else 401 ``{"error": "Unauthorized"}``), as vLLM's
``AuthenticationMiddleware``; ``/health``, ``/metrics``, ``/tokenize`` … stay open.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

import trio

from ddsup import __version__
from ddsup.fake_vllm import _metrics, _pooling
from ddsup.fake_vllm._behaviour import Behaviour
from ddsup.fake_vllm._engine import Engine
from ddsup.fake_vllm._models import ServedModels
from ddsup.fake_vllm._request import (
    GenerationRequest,
    Limits,
    RequestError,
    json_object,
    parse_generation,
)
from ddsup.fake_vllm._responses import DONE, ChunkWriter, dumps, error_body, full_response
from ddsup.fake_vllm._responses_api import parse_responses, response_body
from ddsup.fake_vllm._text import ChoiceText, generate, tokens

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
Handler = Callable[[Scope, Receive, Send], Awaitable[None]]

MAX_BODY_BYTES = 32 * 1024 * 1024
_JSON = b"application/json"
_SSE = b"text/event-stream; charset=utf-8"
_GUARDED = ("/v1", "/v2", "/inference", "/cohere")  # vLLM's AuthenticationMiddleware
_POOLING_ROUTES: dict[str, _pooling.Builder] = {
    "/v1/embeddings": _pooling.embeddings,
    "/pooling": _pooling.pooling,
    "/score": _pooling.score,
    "/v1/score": _pooling.score,
    "/rerank": _pooling.rerank,
    "/v1/rerank": _pooling.rerank,
    "/v2/rerank": _pooling.rerank,
}
_TOKENIZER_ROUTES: dict[str, _pooling.Builder] = {
    "/tokenize": _pooling.tokenize,
    "/detokenize": _pooling.detokenize,
}


class _Disconnected(Exception):
    """The client went away before its request body was complete."""


class FakeVllmApp:
    """ASGI app of one fake lane.

    Its lane identity defaults to the bound port, which is known only once the server
    has bound: :meth:`bound` must be called then, before the first request.
    """

    def __init__(self, behaviour: Behaviour, engine: Engine) -> None:
        self._behaviour = behaviour
        self._engine = engine
        self._lane = ""
        self._lane_header = (b"x-fake-vllm-lane", b"")
        self._served = ServedModels.of(behaviour)
        self._limits = Limits(
            self._served.resolve, behaviour.default_max_tokens, behaviour.max_model_len
        )
        self._key_digests = [hashlib.sha256(k.encode()).digest() for k in behaviour.api_keys]
        self._created = int(time.time())  # like vLLM's model cards: when it loaded
        self._routes: dict[tuple[str, str], Handler] = {
            ("GET", "/health"): self._health,
            ("GET", "/ping"): self._health,
            ("POST", "/ping"): self._health,
            ("GET", "/version"): self._version,
            ("GET", "/v1/models"): self._models,
            ("GET", "/metrics"): self._metrics,
            ("POST", "/v1/completions"): self._completions,
            ("POST", "/v1/chat/completions"): self._chat,
            ("POST", "/v1/responses"): self._responses,
        }
        for path, builder in _POOLING_ROUTES.items():
            self._routes["POST", path] = self._builder_route(builder, in_engine=True)
        for path, builder in _TOKENIZER_ROUTES.items():
            self._routes["POST", path] = self._builder_route(builder, in_engine=False)

    def bound(self, port: int) -> None:
        """Fix the lane identity now that the port is known."""
        self._lane = self._behaviour.lane(port)
        self._lane_header = (b"x-fake-vllm-lane", self._lane.encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        if self._key_digests and not self._authorised(scope):
            await self._respond(send, 401, dumps({"error": "Unauthorized"}))
            return
        handler = self._routes.get((scope["method"], scope["path"]))
        if handler is not None:
            await handler(scope, receive, send)
        elif any(path == scope["path"] for _, path in self._routes):
            await self._respond(send, 405, dumps({"detail": "Method Not Allowed"}))
        else:
            await self._respond(send, 404, dumps({"detail": "Not Found"}))

    def _authorised(self, scope: Scope) -> bool:
        """vLLM's check: guarded paths need one of the keys as a bearer token."""
        if scope["method"] == "OPTIONS" or not scope["path"].startswith(_GUARDED):
            return True
        header = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer":
            return False
        digest = hashlib.sha256(token.encode("latin-1")).digest()
        return any(secrets.compare_digest(digest, key) for key in self._key_digests)

    async def _respond(
        self,
        send: Send,
        status: int,
        body: bytes,
        content_type: bytes = _JSON,
        more: Iterable[tuple[bytes, bytes]] = (),
    ) -> None:
        headers = [
            (b"content-type", content_type),
            (b"content-length", str(len(body)).encode()),
            self._lane_header,
            *more,
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _error(self, send: Send, err: RequestError) -> None:
        body = error_body(err.message, err.err_type, err.status, err.param)
        await self._respond(send, err.status, dumps(body))

    async def _health(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._respond(send, 200 if self._engine.healthy() else 503, b"")

    async def _version(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._respond(send, 200, dumps({"version": f"fake-vllm (ddsup {__version__})"}))

    async def _models(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._respond(send, 200, dumps(self._served.model_list(self._created)))

    async def _metrics(self, scope: Scope, receive: Receive, send: Send) -> None:
        text = _metrics.render(self._engine.snapshot(), self._served.primary)
        await self._respond(send, 200, text, _metrics.CONTENT_TYPE.encode())

    def _builder_route(self, builder: _pooling.Builder, *, in_engine: bool) -> Handler:
        """A JSON-in, JSON-out route; pooling runs in an engine slot, the tokenizer not."""

        async def handle(scope: Scope, receive: Receive, send: Send) -> None:
            try:
                answer = builder(json_object(await _read_body(receive)), self._served)
            except RequestError as err:
                await self._error(send, err)
                return
            except _Disconnected:
                return
            if in_engine and not await self._in_slot(receive, 1):
                return
            await self._respond(send, 200, dumps(answer.body))
            if in_engine:
                self._engine.finished(["stop"], answer.prompt_tokens, 0)

        return handle

    async def _responses(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            data = json_object(await _read_body(receive))
            request = parse_responses(data, self._served, self._behaviour.default_max_tokens)
        except RequestError as err:
            await self._error(send, err)
            return
        except _Disconnected:
            return
        stream = tokens(self._lane, request.model, request.prompt, 0)
        choice = generate(stream, request.max_output_tokens, ())
        if not await self._in_slot(receive, choice.completion_tokens):
            return
        await self._respond(send, 200, dumps(response_body(request, choice)))
        reasons = [choice.finish_reason]
        self._engine.finished(reasons, request.prompt_tokens, choice.completion_tokens)

    async def _in_slot(self, receive: Receive, steps: int) -> bool:
        """Queue for a slot and "generate" ``steps`` tokens; False if the client left."""
        done = False
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_cancel_on_disconnect, receive, nursery.cancel_scope)
            async with self._engine.slot():
                await _sleep_until(self._token_time(trio.current_time(), steps - 1))
            done = True
            nursery.cancel_scope.cancel()
        if not done:
            self._engine.aborted()
        return done

    async def _completions(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._generate(receive, send, chat=False)

    async def _chat(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._generate(receive, send, chat=True)

    async def _generate(self, receive: Receive, send: Send, *, chat: bool) -> None:
        try:
            request = parse_generation(await _read_body(receive), chat=chat, limits=self._limits)
        except RequestError as err:
            await self._error(send, err)
            return
        except _Disconnected:
            return
        choices = self._choices(request)
        # Queueing and generating end early if the client leaves. The last send stays
        # outside the watch: it is what makes hypercorn report the stream closed.
        generated_all = False
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_cancel_on_disconnect, receive, nursery.cancel_scope)
            async with self._engine.slot():
                start = trio.current_time()
                if request.stream:
                    await self._stream(send, request, choices, start)
                else:
                    await _sleep_until(self._token_time(start, _steps(choices) - 1))
            generated_all = True
            nursery.cancel_scope.cancel()
        if not generated_all:
            self._engine.aborted()
            return
        if request.stream:
            await send({"type": "http.response.body", "body": DONE, "more_body": False})
        else:
            await self._respond(send, 200, dumps(full_response(request, choices)))
        generated = sum(c.completion_tokens for c in choices)
        reasons = [c.finish_reason for c in choices]
        self._engine.finished(reasons, request.prompt_tokens, generated)

    def _choices(self, request: GenerationRequest) -> list[ChoiceText]:
        return [
            generate(
                tokens(self._lane, request.model, prompt, i), request.max_tokens, request.stops
            )
            for prompt in request.prompts
            for i in range(request.n)
        ]

    def _token_time(self, start: float, step: int) -> float:
        """When token ``step`` (0-based) is ready: first after ttft, then at the rate."""
        return start + self._behaviour.ttft + step * self._behaviour.token_interval()

    async def _stream(
        self, send: Send, request: GenerationRequest, choices: Sequence[ChoiceText], start: float
    ) -> None:
        headers = [(b"content-type", _SSE), (b"cache-control", b"no-cache"), self._lane_header]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        writer = ChunkWriter(request)
        if request.chat:
            for index in range(len(choices)):
                await _send_event(send, writer.role(index))
        for step in range(_steps(choices)):
            await _sleep_until(self._token_time(start, step))
            for index, choice in enumerate(choices):
                if step >= choice.completion_tokens:
                    continue
                last = step == choice.completion_tokens - 1
                if choice.deltas[step] or last:
                    event = writer.delta(index, choice.deltas[step], choice if last else None)
                    await _send_event(send, event)
        if request.include_usage:
            await _send_event(send, writer.usage(choices))


async def _sleep_until(deadline: float) -> None:
    """Sleep only when there is time to wait: at full speed each send is checkpoint enough."""
    if deadline > trio.current_time():
        await trio.sleep_until(deadline)


def _steps(choices: Sequence[ChoiceText]) -> int:
    return max(c.completion_tokens for c in choices)


async def _send_event(send: Send, event: bytes) -> None:
    await send({"type": "http.response.body", "body": event, "more_body": True})


async def _read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Disconnected
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise RequestError(f"The request body is over {MAX_BODY_BYTES} bytes.", status=413)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _cancel_on_disconnect(receive: Receive, scope: trio.CancelScope) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
