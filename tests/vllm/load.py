"""Clients of the endpoint, with the stock ``openai`` client as a user's program has it.

:class:`Load` keeps a few clients streaming chat completions until it is stopped, and
records each request: when it was sent, whether its stream had begun (a 200 head came)
and how it ended. A request that fails before its stream began is one the endpoint
could have sent to another lane; one that fails mid-stream is not (its bytes reached
the client). :func:`burst` sends many requests at once and keeps each status
and ``Retry-After``. The clients never retry (``max_retries=0``): every failure counts.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType

import openai
from openai.types.chat import ChatCompletionMessageParam

PROMPT: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "Write a short story about a lighthouse keeper."}
]


def client(base_url: str, timeout: float = 120.0, retries: int = 0) -> openai.OpenAI:
    """The stock client pointed at the endpoint, as ``OPENAI_BASE_URL`` would point it;
    it retries nothing unless told (the tests see every answer as it came)."""
    return openai.OpenAI(
        base_url=f"{base_url}/v1", api_key="unused", max_retries=retries, timeout=timeout
    )


@dataclass(frozen=True)
class Request:
    """One streamed chat completion: times are ``time.time()``."""

    sent: float
    streaming: float | None  # when its stream began (a 200 head); None: it never did
    done: float
    error: str | None  # None: it completed with a finish_reason

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class Load:
    """``clients`` threads streaming chat completions of ``model`` through ``base_url``."""

    base_url: str
    model: str
    clients: int = 2
    max_tokens: int = 16
    requests: list[Request] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def __enter__(self) -> Load:
        for n in range(self.clients):
            thread = threading.Thread(target=self._client, name=f"load-{n}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=180)

    def _client(self) -> None:
        with client(self.base_url) as api:
            while not self._stop.is_set():
                self.requests.append(stream_one(api, self.model, self.max_tokens))

    def since(self, moment: float) -> list[Request]:
        """Requests sent at or after wall time ``moment``."""
        return [r for r in list(self.requests) if r.sent >= moment]

    def wait_for(self, condition: Callable[[list[Request]], bool], limit: float = 60.0) -> None:
        """Until ``condition(requests)`` (they arrive from threads: a bounded poll)."""
        deadline = time.monotonic() + limit
        while not condition(list(self.requests)):
            assert time.monotonic() < deadline, f"load: not within {limit:g}s: {self.summary()}"
            time.sleep(0.05)

    def summary(self, requests: list[Request] | None = None) -> str:
        done = list(self.requests) if requests is None else requests
        failed = [r for r in done if not r.ok]
        midway = sum(1 for r in failed if r.streaming)
        errors = sorted({r.error or "" for r in failed})[:5]
        return (
            f"{len(done) - len(failed)} of {len(done)} ok, {len(failed)} failed "
            f"({midway} mid-stream){': ' + '; '.join(errors) if errors else ''}"
        )


def stream_one(api: openai.OpenAI, model: str, max_tokens: int) -> Request:
    """One streamed chat completion; its stream began once ``create`` returned (the
    client had a 200 head: from then on no one can send the request elsewhere)."""
    sent, began = time.time(), None
    error: str | None = None
    try:
        stream = api.chat.completions.create(
            model=model,
            messages=PROMPT,
            max_tokens=max_tokens,
            stream=True,
        )
        began = time.time()
        finished = False
        for chunk in stream:
            finished = finished or any(c.finish_reason for c in chunk.choices)
        if not finished:
            error = "the stream ended without a finish_reason"
    except Exception as err:  # every failure is counted, whatever raised it
        error = f"{type(err).__name__}: {err}"[:300]
    return Request(sent, began, time.time(), error)


@dataclass(frozen=True)
class Answer:
    """One request of a burst: its status and ``Retry-After`` (None: no header)."""

    status: int | None  # None: no HTTP answer at all
    retry_after: str | None
    completed: bool  # 200 with the tokens asked for
    error: str | None = None


def burst(
    base_url: str, model: str, count: int, max_tokens: int, timeout: float = 120.0
) -> list[Answer]:
    """``count`` chat completions sent at once (each from its own thread; ``timeout``
    seconds each, queueing included)."""
    answers: list[Answer] = []
    go = threading.Barrier(count)

    def one() -> None:
        with client(base_url, timeout) as api:
            go.wait()
            answers.append(ask(api, model, max_tokens))

    threads = [threading.Thread(target=one, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout + 60.0)
    return answers


def ask(api: openai.OpenAI, model: str, max_tokens: int) -> Answer:
    """One non-streamed chat completion that runs to ``max_tokens``."""
    try:
        raw = api.chat.completions.with_raw_response.create(
            model=model,
            messages=PROMPT,
            max_tokens=max_tokens,
            extra_body={"ignore_eos": True},  # vLLM: generate all of them
        )
    except openai.APIStatusError as err:
        headers = err.response.headers
        return Answer(err.status_code, headers.get("retry-after"), False, str(err)[:300])
    except openai.APIError as err:
        return Answer(None, None, False, f"{type(err).__name__}: {err}"[:300])
    reply = raw.parse()
    usage = reply.usage
    completed = usage is not None and usage.completion_tokens == max_tokens
    return Answer(raw.status_code, raw.headers.get("retry-after"), completed)
