"""vLLM's pooling, scoring and tokenizer routes, minimal but shaped like vLLM 0.34's.

``/v1/embeddings`` and ``/pooling`` (vectors), ``/score``, ``/v1/score`` and ``/rerank``,
``/v1/rerank``, ``/v2/rerank`` (relevance), ``/tokenize`` and ``/detokenize``. Shapes
follow ``vllm/entrypoints/pooling/*/protocol.py`` and ``serve/tokenize/protocol.py``.
Every number is deterministic: a vector or score depends only on the model name and the
text, so a test can compare lanes and answers. A real vLLM serves pooling routes only
for pooling models; the fake serves them all, so a router can be tested on every route.

The fake tokenizer is one token per whitespace-separated word (as usage counts); a
word's id is its UTF-8 bytes read as a big-endian number when it has at most 7 bytes
(so ``/detokenize`` gives it back) and a 62-bit hash otherwise (detokenized ``<unk>``).
"""

from __future__ import annotations

import base64
import hashlib
import math
import struct
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypedDict, cast

from ddsup._json import Json, JsonObject
from ddsup.fake_vllm._models import ServedModels
from ddsup.fake_vllm._request import RequestError, json_object
from ddsup.fake_vllm._text import count_tokens

DEFAULT_DIMENSIONS = 16
_MAX_ID_BYTES = 7
_HASHED = 1 << 62


class PoolingBody(TypedDict, total=False):
    """The keys the pooling and tokenizer routes read from a body, each as the client sent
    it (any JSON), checked where it is read."""

    model: Json
    input: Json
    messages: Json
    prompt: Json
    dimensions: Json
    encoding_format: Json
    text_1: Json
    text_2: Json
    queries: Json
    documents: Json
    data_1: Json
    data_2: Json
    query: Json
    top_n: Json
    return_token_strs: Json
    tokens: Json


def pooling_body(body: bytes) -> PoolingBody:
    """The request body as a JSON object (a 400 if it is not one)."""
    return cast(PoolingBody, json_object(body))


@dataclass(frozen=True)
class Answer:
    """A route's answer body and the prompt tokens it read (for the engine's counters)."""

    body: JsonObject
    prompt_tokens: int


Builder = Callable[[PoolingBody, ServedModels], Answer]


def embeddings(data: PoolingBody, models: ServedModels) -> Answer:
    model = models.resolve(data.get("model"))
    texts = _inputs(data)
    vectors = [_vector(model, text, _dimensions(data)) for text in texts]
    encoded = [_encode(vector, data.get("encoding_format")) for vector in vectors]
    items: list[Json] = [
        {"index": i, "object": "embedding", "embedding": e} for i, e in enumerate(encoded)
    ]
    return _listing("embd", model, items, texts)


def pooling(data: PoolingBody, models: ServedModels) -> Answer:
    model = models.resolve(data.get("model"))
    texts = _inputs(data)
    items: list[Json] = [
        {
            "index": i,
            "object": "pooling",
            "data": list[Json](_vector(model, text, _dimensions(data))),
        }
        for i, text in enumerate(texts)
    ]
    return _listing("pool", model, items, texts)


def score(data: PoolingBody, models: ServedModels) -> Answer:
    model = models.resolve(data.get("model"))
    left, right = _score_sides(data)
    if len(left) == 1:
        left = left * len(right)
    if len(left) != len(right):
        raise RequestError("The two score inputs must have the same length, or the first one.")
    items: list[Json] = [
        {"index": i, "object": "score", "score": _relevance(model, a, b)}
        for i, (a, b) in enumerate(zip(left, right, strict=True))
    ]
    return _listing("score", model, items, left + right)


def rerank(data: PoolingBody, models: ServedModels) -> Answer:
    model = models.resolve(data.get("model"))
    query = _text(data.get("query"), "query")
    documents = _texts(data.get("documents"), "documents")
    top_n = data.get("top_n") or 0
    if not isinstance(top_n, int) or top_n < 0:
        raise RequestError("`top_n` must be a non-negative integer.", param="top_n")
    scores = [_relevance(model, query, doc) for doc in documents]
    order = sorted(range(len(documents)), key=lambda i: -scores[i])
    results: list[Json] = [
        {
            "index": i,
            "document": {"text": documents[i], "multi_modal": None},
            "relevance_score": scores[i],
        }
        for i in order
    ]
    tokens = sum(count_tokens(query) + count_tokens(d) for d in documents)
    body: JsonObject = {
        "id": f"rerank-{uuid.uuid4().hex}",
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        "results": results[:top_n] if top_n else results,
    }
    return Answer(body, tokens)


def tokenize(data: PoolingBody, models: ServedModels) -> Answer:
    models.resolve(data.get("model"))
    if "messages" in data:
        text = _chat_text(data.get("messages"))
    else:
        text = _text(data.get("prompt"), "prompt")
    words = text.split()
    body: JsonObject = {
        "count": len(words),
        "max_model_len": models.max_model_len,
        "tokens": [_token_id(w) for w in words],
        "token_strs": [*words] if data.get("return_token_strs") else None,
    }
    return Answer(body, 0)


def detokenize(data: PoolingBody, models: ServedModels) -> Answer:
    models.resolve(data.get("model"))
    given = data.get("tokens")
    ids = [t for t in given if isinstance(t, int)] if isinstance(given, list) else []
    if (
        not isinstance(given, list)
        or len(ids) != len(given)
        or not all(not isinstance(t, bool) and 0 <= t < 2**63 for t in ids)
    ):
        raise RequestError("`tokens` must be a list of token ids.", param="tokens")
    return Answer({"prompt": " ".join(_word(t) for t in ids)}, 0)


def _listing(kind: str, model: str, items: list[Json], texts: list[str]) -> Answer:
    tokens = sum(count_tokens(t) for t in texts)
    body: JsonObject = {
        "id": f"{kind}-{uuid.uuid4().hex}",
        "object": "list",
        "created": int(time.time()),
        "model": model,
        "data": items,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0},
    }
    return Answer(body, tokens)


def _inputs(data: PoolingBody) -> list[str]:
    if "messages" in data:
        return [_chat_text(data.get("messages"))]
    value = data.get("input")
    if isinstance(value, list) and value and all(isinstance(t, int) for t in value):
        return [" ".join(map(str, value))]  # one input given as token ids
    if isinstance(value, list) and value and all(isinstance(t, list) for t in value):
        return [" ".join(map(str, ids)) for ids in value if isinstance(ids, list)]
    return _texts(value, "input")


def _texts(value: object, param: str) -> list[str]:
    items = value if isinstance(value, list) else [value]
    if not items:
        raise RequestError(f"`{param}` must not be empty.", param=param)
    return [_text(item, param) for item in items]


def _text(value: object, param: str) -> str:
    if isinstance(value, dict) and isinstance(value.get("text"), str):
        return str(value["text"])  # a content part: {"type": "text", "text": …}
    if not isinstance(value, str):
        raise RequestError(f"`{param}` must be a string or a list of strings.", param=param)
    return value


def _chat_text(messages: object) -> str:
    if not isinstance(messages, list) or not messages:
        raise RequestError("`messages` must be a non-empty list.", param="messages")
    parts = [m.get("content") for m in messages if isinstance(m, dict)]
    return " ".join(p if isinstance(p, str) else "" for p in parts)


def _score_sides(data: PoolingBody) -> tuple[list[str], list[str]]:
    sides = (
        ("text_1", data.get("text_1"), "text_2", data.get("text_2")),
        ("queries", data.get("queries"), "documents", data.get("documents")),
        ("data_1", data.get("data_1"), "data_2", data.get("data_2")),
    )
    for first, one, second, other in sides:
        if first in data or second in data:
            return _texts(one, first), _texts(other, second)
    raise RequestError("Give `queries` and `documents` (or `text_1` and `text_2`).")


def _dimensions(data: PoolingBody) -> int:
    dims = data.get("dimensions")
    if dims is None:
        return DEFAULT_DIMENSIONS
    if isinstance(dims, bool) or not isinstance(dims, int) or not 1 <= dims <= 4096:
        raise RequestError("`dimensions` must be an integer from 1 to 4096.", param="dimensions")
    return dims


def _vector(model: str, text: str, dims: int) -> list[float]:
    """A unit vector that depends only on ``model`` and ``text``."""
    seed = hashlib.blake2b(f"{model}\0{text}".encode(), digest_size=8).digest()
    raw = hashlib.shake_256(seed).digest(4 * dims)
    values = [(v / 2**31) - 1.0 for v in struct.unpack(f"<{dims}I", raw)]
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [v / norm for v in values]


def _encode(vector: list[float], encoding: object) -> Json:
    if encoding in (None, "float"):
        return list[Json](vector)
    if encoding == "base64":  # vLLM: little-endian float32, base64
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
    raise RequestError("`encoding_format` must be float or base64.", param="encoding_format")


def _relevance(model: str, first: str, second: str) -> float:
    digest = hashlib.blake2b(f"{model}\0{first}\0{second}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def _token_id(word: str) -> int:
    raw = word.encode()
    if len(raw) <= _MAX_ID_BYTES:
        return int.from_bytes(raw, "big")
    digest = hashlib.blake2b(raw, digest_size=8).digest()
    return _HASHED | (int.from_bytes(digest, "big") >> 2)


def _word(token_id: int) -> str:
    if token_id >= _HASHED or token_id == 0:
        return "<unk>"
    try:
        return token_id.to_bytes(_MAX_ID_BYTES, "big").lstrip(b"\0").decode()
    except UnicodeDecodeError:
        return "<unk>"
