"""Parse and validate the body of ``/v1/completions`` and ``/v1/chat/completions``.

Only what changes the fake's answer is read (model, prompt or messages, ``n``,
``max_tokens`` / ``max_completion_tokens``, ``stop``, ``stream``, ``stream_options``);
other OpenAI parameters (temperature, seed, …) are accepted and ignored, as vLLM accepts
them. Problems become :class:`RequestError`, which the app turns into vLLM's error JSON.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypedDict, cast

from ddsup._json import Json, JsonObject
from ddsup.fake_vllm._text import count_tokens


class RequestError(Exception):
    """A request the fake refuses: HTTP status, vLLM error type and offending parameter."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        err_type: str = "BadRequestError",
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.err_type = err_type
        self.param = param


def invalid(loc: str, kind: str, msg: str, given: object) -> RequestError:
    """A refusal by vLLM's request model (pydantic, through FastAPI): type ``Bad Request``,
    ``param`` the field's location (``body.messages``) and the validation error as text."""
    where = f"body.{loc}" if loc else "body"
    detail = {"type": kind, "loc": where, "msg": msg, "input": _shown(given)}
    return RequestError(f"1 validation error:\n  {detail}", err_type="Bad Request", param=where)


def _shown(given: object) -> str:
    """How vLLM's validation message shows the input: containers by their size only."""
    if isinstance(given, dict):
        return f"<dict of {len(given)} items>"
    if isinstance(given, list):
        return f"<list of {len(given)} items>"
    return str(given)


@dataclass(frozen=True)
class Limits:
    """What the served model allows, and how a request's ``model`` resolves.

    ``resolve_model`` maps the request's ``model`` (``None`` when absent) to the name the
    answer carries, raising :class:`RequestError` (404) for a name the lane does not serve
    (:meth:`~ddsup.fake_vllm._models.ServedModels.resolve`).
    """

    resolve_model: Callable[[object], str]
    default_max_tokens: int
    max_model_len: int


class GenerationBody(TypedDict, total=False):
    """The keys of a completions or chat completions body that change the fake's answer.

    Each value is as the client sent it, any JSON: the parser checks each one where it
    reads it, as vLLM's request model would.
    """

    model: Json
    prompt: Json
    messages: Json
    n: Json
    max_tokens: Json
    max_completion_tokens: Json
    stop: Json
    stream: Json
    stream_options: Json


@dataclass(frozen=True)
class GenerationRequest:
    """A validated generation request; ``prompts`` has one entry per prompt (chat: one)."""

    chat: bool
    model: str
    prompts: tuple[str, ...]
    prompt_tokens: int
    n: int
    max_tokens: int
    stops: tuple[str, ...]
    stream: bool
    include_usage: bool


def parse_generation(body: bytes, *, chat: bool, limits: Limits) -> GenerationRequest:
    """Validate ``body`` against the served model; raise :class:`RequestError` if invalid."""
    data = cast(GenerationBody, json_object(body))
    model = limits.resolve_model(data.get("model"))
    prompts = (_chat_prompt(data),) if chat else _completion_prompts(data)
    prompt_tokens = sum(count_tokens(p) for p in prompts)
    longest = max(count_tokens(p) for p in prompts)
    stream = _flag(data.get("stream"), "stream", False)
    if data.get("stream_options") is not None and not stream:
        raise RequestError(
            "Stream options can only be defined when `stream=True`. (parameter=stream_options)",
            param="stream_options",
        )
    return GenerationRequest(
        chat=chat,
        model=model,
        prompts=prompts,
        prompt_tokens=prompt_tokens,
        n=_positive(data.get("n"), "n", 1),
        max_tokens=_max_tokens(data, longest, limits),
        stops=_stops(data.get("stop")),
        stream=stream,
        include_usage=stream
        and bool(_stream_options(data.get("stream_options")).get("include_usage")),
    )


def parse_batch(body: bytes, limits: Limits) -> GenerationRequest:
    """``/v1/chat/completions/batch``: ``messages`` is a list of conversations, answered
    as one choice each; vLLM answers it whole, ``stream`` or not, and refuses ``n > 1``."""
    raw = json_object(body)
    data = cast(GenerationBody, raw)
    conversations = data.get("messages")
    if not isinstance(conversations, list) or not conversations:
        raise invalid("messages", "list_type", "Input should be a valid list", conversations)
    if (n := _positive(data.get("n"), "n", 1)) > 1:
        raise RequestError(
            "Batch chat completions do not support `n > 1`. Please set `n` to 1. "
            f"(parameter=n, value={n})",
            param="n",
        )
    one = {key: value for key, value in raw.items() if key not in ("stream", "stream_options")}
    requests = [
        parse_generation(_dumps({**one, "messages": conversation}), chat=True, limits=limits)
        for conversation in conversations
    ]
    first = requests[0]
    return GenerationRequest(
        chat=True, model=first.model, prompts=tuple(r.prompts[0] for r in requests),
        prompt_tokens=sum(r.prompt_tokens for r in requests), n=1,
        max_tokens=min(r.max_tokens for r in requests), stops=first.stops, stream=False,
        include_usage=False,
    )  # fmt: skip


def _dumps(data: JsonObject) -> bytes:
    return json.dumps(data).encode()


def json_object(body: bytes) -> JsonObject:
    """The request body as a JSON object, or a 400 saying why not."""
    try:
        data: Json = json.loads(body)
    except json.JSONDecodeError as err:
        raise invalid(str(err.pos), "json_invalid", "JSON decode error", {}) from err
    except (UnicodeDecodeError, ValueError) as err:
        raise invalid("0", "json_invalid", "JSON decode error", {}) from err
    if not isinstance(data, dict):
        raise invalid(
            "",
            "model_attributes_type",
            "Input should be a valid dictionary or object to extract fields from",
            data,
        )
    return data


def _completion_prompts(data: GenerationBody) -> tuple[str, ...]:
    prompt = data.get("prompt")
    if isinstance(prompt, str):
        return (prompt,)
    if isinstance(prompt, list) and prompt:
        if (texts := strings(prompt)) is not None:
            return tuple(texts)
        if all(isinstance(t, int) for t in prompt):
            return (" ".join(map(str, prompt)),)  # one prompt given as token ids
        ids = [p for p in prompt if isinstance(p, list) and all(isinstance(t, int) for t in p)]
        if len(ids) == len(prompt):
            return tuple(" ".join(map(str, p)) for p in ids)
    if prompt is None or prompt == []:
        raise RequestError(
            "Either prompt or prompt_embeds must be provided and non-empty. (parameter=prompt)",
            param="prompt",
        )
    raise invalid(
        "prompt", "string_type", "Input should be a string, a list of strings or token ids", prompt
    )


def _chat_prompt(data: GenerationBody) -> str:
    messages = data.get("messages")
    if messages is None:
        raise invalid("messages", "missing", "Field required", data)
    if not isinstance(messages, list):
        raise invalid("messages", "list_type", "Input should be a valid list", messages)
    if not messages:
        raise RequestError(
            "Cannot apply chat template to an empty conversation. Provide at least one message."
        )
    lines = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise invalid(f"messages.{i}.role", "missing", "Field required", message)
        lines.append(f"{message['role']}: {_content_text(message.get('content'), i)}")
    return "\n".join(lines)


def _content_text(content: object, index: int) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        parts = [p.get("text", "") for p in content if isinstance(p, dict)]
        return " ".join(p for p in parts if isinstance(p, str))
    loc = f"messages.{index}.content"
    raise invalid(loc, "string_type", "Input should be a string or a list of parts", content)


def _max_tokens(data: GenerationBody, prompt_tokens: int, limits: Limits) -> int:
    key, value = "max_completion_tokens", data.get("max_completion_tokens")
    if value is None:
        key, value = "max_tokens", data.get("max_tokens")
    room = limits.max_model_len - prompt_tokens
    if value is None:
        if room < 1:
            raise RequestError(_too_long(limits.max_model_len, prompt_tokens, 1), param="messages")
        return min(limits.default_max_tokens, room)
    wanted = _positive(value, key, 1)
    if wanted > limits.max_model_len:
        raise RequestError(
            f"{key}={wanted} cannot be greater than max_model_len={limits.max_model_len}. "
            f"Please request fewer output tokens. (parameter={key}, value={wanted})",
            param=key,
        )
    if wanted > room:
        raise RequestError(_too_long(limits.max_model_len, prompt_tokens, wanted), param=key)
    return wanted


def _too_long(max_model_len: int, prompt_tokens: int, max_tokens: int) -> str:
    return (
        f"This model's maximum context length is {max_model_len} tokens. However, you "
        f"requested {prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, "
        f"{max_tokens} in the completion). Please reduce the length of the messages or "
        "completion."
    )


def _stops(stop: Json) -> tuple[str, ...]:
    if stop is None:
        return ()
    if isinstance(stop, str):
        stop = [stop]
    texts = strings(stop) if isinstance(stop, list) else None
    if texts is None:
        raise invalid("stop", "string_type", "Input should be a string or a list of strings", stop)
    return tuple(s for s in texts if s)


def strings(values: list[Json]) -> list[str] | None:
    """``values`` when each one is a string, else ``None``."""
    texts = [value for value in values if isinstance(value, str)]
    return texts if len(texts) == len(values) else None


def _stream_options(options: Json) -> JsonObject:
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise invalid("stream_options", "model_type", "Input should be an object", options)
    return options


def _positive(value: Json, key: str, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(key, "int_type", "Input should be a valid integer", value)
    if value < 1:  # vLLM's own check, after the request model's
        if key == "n":
            raise RequestError(f"n must be at least 1, got {value}.")
        raise RequestError(
            f"{key} must be at least 1, got {value}. (parameter={key}, value={value})", param=key
        )
    return value


def _flag(value: Json, key: str, default: bool) -> bool:
    if value is None:
        return default
    if not isinstance(value, bool):
        raise invalid(key, "bool_type", "Input should be a valid boolean", value)
    return value
