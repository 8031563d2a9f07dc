"""``POST /v1/messages`` and ``/v1/messages/count_tokens`` (Anthropic's Messages API).

As vLLM 0.32 serves them (``vllm/entrypoints/anthropic``): the request names ``model``,
``max_tokens`` (required), ``messages`` and optionally ``system``, ``stop_sequences`` and
``stream``; the answer is a ``message`` with one ``text`` content block, ``stop_reason``
``end_turn``, ``max_tokens`` or ``stop_sequence``, and ``usage`` in input and output
tokens. A stream is Anthropic's named SSE events (``message_start``,
``content_block_start``, one ``content_block_delta`` per token, ``content_block_stop``,
``message_delta``, ``message_stop``) and ends without ``[DONE]``. Errors the request
model finds keep vLLM's OpenAI shape; the handler's own (an unknown model) are
Anthropic's ``{"type": "error", "error": {"type", "message"}}``, as vLLM answers them.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import TypedDict, cast

from ddsup._json import Json, JsonObject
from ddsup.fake_vllm._request import (
    GenerationRequest,
    Limits,
    RequestError,
    invalid,
    json_object,
    strings,
)
from ddsup.fake_vllm._text import ChoiceText, count_tokens

_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens"}


def anthropic_error(err: RequestError) -> JsonObject:
    """The body of a refusal of ``/v1/messages``: Anthropic's shape, vLLM's words."""
    return {"type": "error", "error": {"type": err.err_type, "message": err.message}}


class MessagesBody(TypedDict, total=False):
    """The keys of a Messages API body the fake reads, each as the client sent it (any
    JSON), checked where it is read."""

    model: Json
    messages: Json
    system: Json
    max_tokens: Json
    stop_sequences: Json
    stream: Json


def parse_messages(body: bytes, limits: Limits, *, count_only: bool = False) -> GenerationRequest:
    """The request as one chat prompt (``system`` first); ``RequestError`` if invalid."""
    data = cast(MessagesBody, json_object(body))
    if not count_only and data.get("max_tokens") is None:
        raise invalid("max_tokens", "missing", "Field required", data)
    messages = data.get("messages")
    if messages is None:
        raise invalid("messages", "missing", "Field required", data)
    if not isinstance(messages, list):
        raise invalid("messages", "list_type", "Input should be a valid list", messages)
    model = limits.resolve_model(data.get("model"))
    lines = [f"system: {_text(data.get('system'), 'system')}"] if data.get("system") else []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise invalid(f"messages.{i}.role", "missing", "Field required", message)
        lines.append(f"{message['role']}: {_text(message.get('content'), f'messages.{i}')}")
    prompt = "\n".join(lines)
    max_tokens = 1 if count_only else _max_tokens(data.get("max_tokens"))
    stops = data.get("stop_sequences") or []
    texts = strings(stops) if isinstance(stops, list) else None
    if texts is None:
        raise invalid("stop_sequences", "list_type", "Input should be a valid list", stops)
    stream = data.get("stream") is True
    return GenerationRequest(
        chat=True, model=model, prompts=(prompt,), prompt_tokens=count_tokens(prompt), n=1,
        max_tokens=max_tokens, stops=tuple(s for s in texts if s), stream=stream,
        include_usage=False,
    )  # fmt: skip


def _text(content: object, loc: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(block.get("text", "")) for block in content if isinstance(block, dict))
    raise invalid(f"{loc}.content", "string_type", "Input should be a valid string", content)


def _max_tokens(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid("max_tokens", "int_type", "Input should be a valid integer", value)
    if value < 1:
        raise RequestError(f"max_tokens must be at least 1, got {value}.", param="max_tokens")
    return value


def count_body(request: GenerationRequest) -> JsonObject:
    """The answer of ``/v1/messages/count_tokens``."""
    tokens = request.prompt_tokens
    return {"input_tokens": tokens, "context_management": {"original_input_tokens": tokens}}


def _stop_reason(choice: ChoiceText) -> str:
    return "stop_sequence" if choice.stop_reason else _STOP_REASONS[choice.finish_reason]


def message_body(request: GenerationRequest, choice: ChoiceText, message_id: str) -> JsonObject:
    """The non-streaming answer: one ``message``."""
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "content": [{"type": "text", "text": choice.text}],
        "model": request.model,
        "stop_reason": _stop_reason(choice),
        "usage": {"input_tokens": request.prompt_tokens, "output_tokens": choice.completion_tokens},
    }


def new_message_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex}"  # vLLM's own prefix, even on this API


@dataclass(frozen=True)
class MessagesWriter:
    """The named SSE events of one streamed ``message``."""

    request: GenerationRequest
    message_id: str

    def start(self) -> bytes:
        message: JsonObject = {
            "id": self.message_id, "type": "message", "role": "assistant", "content": [],
            "model": self.request.model, "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": self.request.prompt_tokens, "output_tokens": 0},
        }  # fmt: skip
        block: JsonObject = {"type": "text", "text": ""}
        return _event("message_start", {"type": "message_start", "message": message}) + _event(
            "content_block_start",
            {"type": "content_block_start", "content_block": block, "index": 0},
        )

    def delta(self, text: str) -> bytes:
        delta: JsonObject = {"type": "text_delta", "text": text}
        return _event(
            "content_block_delta", {"type": "content_block_delta", "delta": delta, "index": 0}
        )

    def end(self, choice: ChoiceText) -> bytes:
        usage: JsonObject = {
            "input_tokens": self.request.prompt_tokens,
            "output_tokens": choice.completion_tokens,
        }
        delta: JsonObject = {
            "stop_reason": _stop_reason(choice),
            "stop_sequence": choice.stop_reason,
        }
        return (
            _event("content_block_stop", {"type": "content_block_stop", "index": 0})
            + _event("message_delta", {"type": "message_delta", "delta": delta, "usage": usage})
            + _event("message_stop", {"type": "message_stop"})
        )


def _event(name: str, data: JsonObject) -> bytes:
    return b"event: %s\ndata: %s\n\n" % (
        name.encode(),
        json.dumps(data, separators=(",", ":")).encode(),
    )
