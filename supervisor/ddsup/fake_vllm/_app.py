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
from functools import partial

import trio

from ddsup import __version__
from ddsup.fake_vllm import _pooling, _vllm_metrics
from ddsup.fake_vllm._answers import SSE, Answer, BatchAnswer, MessagesAnswer, OpenAIAnswer
from ddsup.fake_vllm._asgi import (
    Disconnected,
    HTTPResponseStartEvent,
    HTTPScope,
    Receive,
    Scope,
    Send,
    cancel_on_disconnect,
    lifespan,
    read_body,
)
from ddsup.fake_vllm._behaviour import Behaviour
from ddsup.fake_vllm._engine import ENGINE_DEAD, Engine
from ddsup.fake_vllm._messages_api import anthropic_error, count_body, parse_messages
from ddsup.fake_vllm._models import ServedModels
from ddsup.fake_vllm._request import (
    GenerationRequest,
    Limits,
    RequestError,
    parse_batch,
    parse_generation,
)
from ddsup.fake_vllm._responses import dumps, error_body
from ddsup.fake_vllm._responses_api import parse_responses, response_body
from ddsup.fake_vllm._text import ChoiceText, generate, tokens

Handler = Callable[[HTTPScope, Receive, Send], Awaitable[None]]
Parse = Callable[..., GenerationRequest]  # (body, limits=…)
AnswerKind = Callable[[GenerationRequest, Sequence[ChoiceText]], Answer]

_JSON = b"application/json"
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
_SCALE_OUT_ROUTES = (
    "/v1/chat/completions/render",
    "/v1/completions/render",
    "/v1/messages/render",
    "/v1/responses/render",
    "/v1/chat/completions/derender",
    "/v1/completions/derender",
)
_SCALE_OUT_OFF = (
    "Scale-out endpoints are disabled. Restart vllm serve with --enable-scale-out to enable them."
)
_TOKENIZER_ROUTES: dict[str, _pooling.Builder] = {
    "/tokenize": _pooling.tokenize,
    "/detokenize": _pooling.detokenize,
}


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
            ("POST", "/v1/chat/completions/batch"): self._batch,
            ("POST", "/v1/responses"): self._responses,
            ("POST", "/v1/messages"): self._messages,
            ("POST", "/v1/messages/count_tokens"): self._count_tokens,
            ("GET", "/load"): self._load,
        }
        for path in _SCALE_OUT_ROUTES:
            self._routes["POST", path] = self._scale_out
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
            await lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        if self._key_digests and not self._authorised(scope):
            await self._respond(send, 401, dumps({"error": "Unauthorized"}))
            return
        handler = self._routes.get((scope["method"], scope["path"]))
        if handler is not None:
            await handler(scope, receive, send)
        elif allowed := sorted(method for method, path in self._routes if path == scope["path"]):
            allow = (b"allow", ", ".join(allowed).encode())
            await self._respond(send, 405, dumps({"detail": "Method Not Allowed"}), more=[allow])
        else:
            await self._respond(send, 404, dumps({"detail": "Not Found"}))

    def _authorised(self, scope: HTTPScope) -> bool:
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
        await send(_start(status, headers))
        await send({"type": "http.response.body", "body": body, "more_body": False})

    async def _error(self, send: Send, err: RequestError) -> None:
        body = error_body(err.message, err.err_type, err.status, err.param)
        await self._respond(send, err.status, dumps(body))

    async def _health(self, scope: HTTPScope, receive: Receive, send: Send) -> None:
        await self._respond(send, 200 if self._engine.healthy() else 503, b"")

    async def _load(self, scope: HTTPScope, receive: Receive, send: Send) -> None:
        """vLLM's ``/load`` without ``--enable-server-load-tracking``: always 0."""
        await self._respond(send, 200, dumps({"server_load": 0}))

    async def _scale_out(self, scope: HTTPScope, receive: Receive, send: Send) -> None:
        """Render and derender, as vLLM answers them without ``--enable-scale-out``."""
        body = error_body(_SCALE_OUT_OFF, "PermissionDeniedError", 403)
        await self._respond(send, 403, dumps(body))

    async def _version(self, scope: HTTPScope, receive: Receive, send: Send) -> None:
        await self._respond(send, 200, dumps({"version": f"fake-vllm (ddsup {__version__})"}))

    async def _models(self, scope: HTTPScope, receive: Receive, send: Send) -> None:
        await self._respond(send, 200, dumps(self._served.model_list(self._created)))

    async def _metrics(self, scope: HTTPScope, receive: Receive, send: Send) -> None:
        text = _vllm_metrics.render(self._engine.snapshot(), self._served.primary)
        await self._respond(send, 200, text, _vllm_metrics.CONTENT_TYPE.encode())

    def _builder_route(self, builder: _pooling.Builder, *, in_engine: bool) -> Handler:
        """A JSON-in, JSON-out route; pooling runs in an engine slot, the tokenizer not."""

        async def handle(scope: HTTPScope, receive: Receive, send: Send) -> None:
            try:
                answer = builder(_pooling.pooling_body(await read_body(receive)), self._served)
            except RequestError as err:
                await self._error(send, err)
                return
            except Disconnected:
                return
            if in_engine and not await self._in_slot(receive, send, 1):
                return
            await self._respond(send, 200, dumps(answer.body))
            if in_engine:
                self._engine.finished(["stop"], answer.prompt_tokens, 0)

        return handle

    async def _responses(self, scope: HTTPScope, receive: Receive, send: Send) -> None:
        try:
            body = await read_body(receive)
            request = parse_responses(body, self._served, self._behaviour.default_max_tokens)
        except RequestError as err:
            await self._error(send, err)
            return
        except Disconnected:
            return
        stream = tokens(self._lane, request.model, request.prompt, 0)
        choice = generate(stream, request.max_output_tokens, ())
        if not await self._in_slot(receive, send, choice.completion_tokens):
            return
        await self._respond(send, 200, dumps(response_body(request, choice)))
        reasons = [choice.finish_reason]
        self._engine.finished(reasons, request.prompt_tokens, choice.completion_tokens)

    async def _in_slot(self, receive: Receive, send: Send, steps: int) -> bool:
        """Queue for a slot and "generate" ``steps`` tokens; False if the client left or
        the engine is dead (then vLLM's 500 is sent)."""
        done = False
        if not self._engine.dead:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(cancel_on_disconnect, receive, nursery.cancel_scope)
                nursery.start_soon(self._engine.cancel_when_dead, nursery.cancel_scope)
                async with self._engine.slot():
                    await _sleep_until(self._token_time(trio.current_time(), steps - 1))
                done = True
                nursery.cancel_scope.cancel()
        if not done:
            await self._cut_short(send, streamed=False)
        return done

    async def _completions(self, scope: HTTPScope, receive: Receive, send: Send) -> None:
        await self._generate(receive, send, parse=partial(parse_generation, chat=False))

    async def _chat(self, scope: HTTPScope, receive: Receive, send: Send) -> None:
        await self._generate(receive, send, parse=partial(parse_generation, chat=True))

    async def _batch(self, scope: HTTPScope, receive: Receive, send: Send) -> None:
        await self._generate(receive, send, parse=parse_batch, kind=BatchAnswer)

    async def _messages(self, scope: HTTPScope, receive: Receive, send: Send) -> None:
        await self._generate(receive, send, parse=parse_messages, kind=MessagesAnswer)

    async def _count_tokens(self, scope: HTTPScope, receive: Receive, send: Send) -> None:
        try:
            request = parse_messages(await read_body(receive), self._limits, count_only=True)
        except RequestError as err:
            await self._messages_error(send, err)
            return
        except Disconnected:
            return
        await self._respond(send, 200, dumps(count_body(request)))

    async def _messages_error(self, send: Send, err: RequestError) -> None:
        """The request model's refusals in vLLM's OpenAI shape, the handler's in Anthropic's."""
        if err.err_type == "Bad Request":
            await self._error(send, err)
        else:
            await self._respond(send, err.status, dumps(anthropic_error(err)))

    async def _generate(
        self, receive: Receive, send: Send, *, parse: Parse, kind: AnswerKind = OpenAIAnswer
    ) -> None:
        try:
            request = parse(await read_body(receive), limits=self._limits)
        except RequestError as err:
            await (self._messages_error if kind is MessagesAnswer else self._error)(send, err)
            return
        except Disconnected:
            return
        answer = kind(request, self._choices(request))
        if self._engine.dead:
            await self._engine_dead(send)
            return
        # Queueing and generating end early if the client leaves or the engine dies. The
        # last send stays outside the watch: it makes hypercorn report the stream closed.
        generated_all = streamed = False
        async with trio.open_nursery() as nursery:
            nursery.start_soon(cancel_on_disconnect, receive, nursery.cancel_scope)
            nursery.start_soon(self._engine.cancel_when_dead, nursery.cancel_scope)
            async with self._engine.slot():
                start = trio.current_time()
                if request.stream:
                    streamed = True
                    await self._stream(send, answer, start)
                else:
                    await _sleep_until(self._token_time(start, _steps(answer.choices) - 1))
            generated_all = True
            nursery.cancel_scope.cancel()
        if not generated_all:
            await self._cut_short(send, streamed)
            return
        if request.stream:
            await send({"type": "http.response.body", "body": answer.closing(), "more_body": False})
        else:
            await self._respond(send, 200, answer.whole())
        generated = sum(c.completion_tokens for c in answer.choices)
        reasons = [c.finish_reason for c in answer.choices]
        self._engine.finished(reasons, request.prompt_tokens, generated)

    async def _cut_short(self, send: Send, streamed: bool) -> None:
        """The client left (nothing to send), or the engine died: vLLM's 500, or the end
        of a stream that had begun."""
        self._engine.aborted()
        if not self._engine.dead:
            return
        if streamed:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        else:
            await self._engine_dead(send)

    async def _engine_dead(self, send: Send) -> None:
        """vLLM's answer once its engine core is gone (``EngineDeadError``)."""
        self._engine.request_failed()
        body = error_body(ENGINE_DEAD, "InternalServerError", 500)
        await self._respond(send, 500, dumps(body))

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

    async def _stream(self, send: Send, answer: Answer, start: float) -> None:
        headers = [(b"content-type", SSE), (b"cache-control", b"no-cache"), self._lane_header]
        await send(_start(200, headers))
        for event in answer.opening():
            await _send_event(send, event)
        for step in range(_steps(answer.choices)):
            await _sleep_until(self._token_time(start, step))
            for event in answer.step(step):
                await _send_event(send, event)


async def _sleep_until(deadline: float) -> None:
    """Sleep only when there is time to wait: at full speed each send is checkpoint enough."""
    if deadline > trio.current_time():
        await trio.sleep_until(deadline)


def _steps(choices: Sequence[ChoiceText]) -> int:
    return max(c.completion_tokens for c in choices)


async def _send_event(send: Send, event: bytes) -> None:
    await send({"type": "http.response.body", "body": event, "more_body": True})


def _start(status: int, headers: list[tuple[bytes, bytes]]) -> HTTPResponseStartEvent:
    # ``trailers`` is ASGI's default, spelt out: hypercorn's type marks it NotRequired
    # in a way that mypy, checking for Python 3.10, reads as required.
    return {"type": "http.response.start", "status": status, "headers": headers, "trailers": False}
