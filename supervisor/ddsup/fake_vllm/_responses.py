"""The JSON objects the fake answers with, shaped like vLLM's own.

Field names and defaults follow ``vllm/entrypoints/openai/protocol.py`` at vLLM commit
0052bed36509c7a5a2d8e48265334e40cf2f5a0e (the v0.10 series): ``ErrorResponse`` is
``{"error": {"message", "type", "param", "code"}}``, ``ModelCard`` has ``owned_by =
"vllm"``, ``root`` and ``max_model_len``, completion choices carry ``stop_reason`` next
to ``finish_reason``, and stream chunks are ``text_completion`` /
``chat.completion.chunk`` objects whose final usage chunk has no choices.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence

from ddsup._json import Json, JsonObject
from ddsup.fake_vllm._request import GenerationRequest
from ddsup.fake_vllm._text import ChoiceText


def dumps(obj: object) -> bytes:
    """Compact JSON, the way a server sends it."""
    return json.dumps(obj, separators=(",", ":")).encode()


def error_body(message: str, err_type: str, code: int, param: str | None = None) -> JsonObject:
    return {"error": {"message": message, "type": err_type, "param": param, "code": code}}


def model_list(model: str, max_model_len: int, created: int) -> JsonObject:
    card: JsonObject = {
        "id": model,
        "object": "model",
        "created": created,
        "owned_by": "vllm",
        "root": model,
        "parent": None,
        "max_model_len": max_model_len,
        "permission": [],
    }
    return {"object": "list", "data": [card]}


def new_id(request: GenerationRequest) -> str:
    return f"{'chatcmpl' if request.chat else 'cmpl'}-{uuid.uuid4().hex}"


def usage(request: GenerationRequest, choices: Sequence[ChoiceText]) -> JsonObject:
    completion = sum(c.completion_tokens for c in choices)
    return {
        "prompt_tokens": request.prompt_tokens,
        "total_tokens": request.prompt_tokens + completion,
        "completion_tokens": completion,
        "prompt_tokens_details": None,
    }


def full_response(request: GenerationRequest, choices: Sequence[ChoiceText]) -> JsonObject:
    """The non-streaming body: ``text_completion`` or ``chat.completion``."""
    return {
        "id": new_id(request),
        "object": "chat.completion" if request.chat else "text_completion",
        "created": int(time.time()),
        "model": request.model,
        "choices": [_full_choice(request.chat, i, c) for i, c in enumerate(choices)],
        "usage": usage(request, choices),
    }


def _full_choice(chat: bool, index: int, choice: ChoiceText) -> JsonObject:
    if chat:
        body: JsonObject = {
            "index": index,
            "message": {"role": "assistant", "content": choice.text, "tool_calls": []},
        }
    else:
        body = {"index": index, "text": choice.text}
    body.update(logprobs=None, finish_reason=choice.finish_reason, stop_reason=choice.stop_reason)
    return body


class ChunkWriter:
    """Builds the ``data: …`` SSE events of one streamed response (shared id and time)."""

    def __init__(self, request: GenerationRequest) -> None:
        self._request = request
        self._head = {
            "id": new_id(request),
            "object": "chat.completion.chunk" if request.chat else "text_completion",
            "created": int(time.time()),
            "model": request.model,
        }
        head = dumps(self._head)[:-1]  # without the closing brace
        self._prefix = b"data: " + head + b',"choices":[{"index":'
        self._text_open = b',"delta":{"content":' if request.chat else b',"text":'
        self._text_close = b"}" if request.chat else b""

    def role(self, index: int) -> bytes:
        """vLLM's first chat chunk per choice announces the assistant role."""
        choice: JsonObject = {"index": index, "delta": {"role": "assistant", "content": ""}}
        choice.update(logprobs=None, finish_reason=None)
        return self._event([choice])

    def delta(self, index: int, text: str, finish: ChoiceText | None) -> bytes:
        """A chunk carrying ``text``; ``finish`` marks the choice's last chunk.

        The hot path of streaming (one call per token), so it fills a pre-rendered
        template instead of serialising the whole chunk: only the text is escaped.
        """
        end = b'null,"stop_reason":null}]}\n\n'
        if finish is not None:
            reason = dumps(finish.finish_reason)
            end = reason + b',"stop_reason":' + dumps(finish.stop_reason) + b"}]}\n\n"
        return b"".join(
            (
                self._prefix,
                str(index).encode(),
                self._text_open,
                dumps(text),
                self._text_close,
                _MIDDLE,
                end,
            )
        )

    def usage(self, choices: Sequence[ChoiceText]) -> bytes:
        """The final chunk of ``stream_options.include_usage``: no choices, just usage."""
        return self._event([], usage(self._request, choices))

    def _event(self, choices: list[Json], usage_info: JsonObject | None = None) -> bytes:
        chunk: JsonObject = {**self._head, "choices": choices}
        if usage_info is not None:
            chunk["usage"] = usage_info
        return b"data: " + dumps(chunk) + b"\n\n"


DONE = b"data: [DONE]\n\n"
_MIDDLE = b',"logprobs":null,"finish_reason":'
