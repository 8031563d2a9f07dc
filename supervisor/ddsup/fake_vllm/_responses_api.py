"""``POST /v1/responses`` (OpenAI's Responses API), non-streaming, shaped like vLLM 0.34's.

vLLM's ``ResponsesResponse`` (``vllm/entrypoints/openai/responses/protocol.py``): a
``response`` object whose ``output`` holds one assistant ``message`` with one
``output_text`` part, and ``usage`` in the Responses API's own terms (``input_tokens``,
``output_tokens``). The text is the fake's deterministic text for the input, generated
under the same engine slot and token timing as a completion. ``"stream": true`` is
refused with a 400 that says so: the fake does not stream this API.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import TypedDict, cast

from ddsup._json import Json, JsonObject
from ddsup.fake_vllm._models import ServedModels
from ddsup.fake_vllm._request import RequestError, json_object
from ddsup.fake_vllm._text import ChoiceText, count_tokens


@dataclass(frozen=True)
class ResponsesRequest:
    """What the fake reads of a Responses API request."""

    model: str
    prompt: str
    prompt_tokens: int
    max_output_tokens: int
    instructions: str | None


class ResponsesBody(TypedDict, total=False):
    """The keys of a ``/v1/responses`` body the fake reads, each as the client sent it
    (any JSON), checked where it is read."""

    model: Json
    input: Json
    instructions: Json
    max_output_tokens: Json
    stream: Json


def parse_responses(body: bytes, models: ServedModels, default_max_tokens: int) -> ResponsesRequest:
    """``body`` as a request; :class:`RequestError` when vLLM would refuse it."""
    data = cast(ResponsesBody, json_object(body))
    if data.get("stream"):
        raise RequestError("fake-vllm does not stream /v1/responses.", param="stream")
    model = models.resolve(data.get("model"))
    instructions = data.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise RequestError("`instructions` must be a string.", param="instructions")
    prompt = "\n".join(filter(None, [instructions, _input_text(data.get("input"))]))
    prompt_tokens = count_tokens(prompt)
    wanted = data.get("max_output_tokens")
    if wanted is None:
        wanted = default_max_tokens
    if isinstance(wanted, bool) or not isinstance(wanted, int) or wanted < 1:
        raise RequestError(
            "`max_output_tokens` must be a positive integer.", param="max_output_tokens"
        )
    room = models.max_model_len - prompt_tokens
    if wanted > room:
        raise RequestError(
            f"This model's maximum context length is {models.max_model_len} tokens; the "
            f"input has {prompt_tokens} and max_output_tokens is {wanted}.",
            param="max_output_tokens",
        )
    return ResponsesRequest(model, prompt, prompt_tokens, wanted, instructions)


def _input_text(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value:
        return "\n".join(_item_text(item) for item in value)
    raise RequestError("`input` must be a string or a list of input items.", param="input")


def _item_text(item: object) -> str:
    if not isinstance(item, dict):
        raise RequestError("Each input item must be an object.", param="input")
    content = item.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and "text" in p
        )
    return ""


def response_body(request: ResponsesRequest, choice: ChoiceText) -> JsonObject:
    """The completed ``response`` object for ``choice``, the generated text."""
    output_tokens = choice.completion_tokens
    status = "completed" if choice.finish_reason == "stop" else "incomplete"
    message: JsonObject = {
        "id": f"msg_{uuid.uuid4().hex}",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [
            {"type": "output_text", "text": choice.text, "annotations": [], "logprobs": None}
        ],
    }
    return {
        "id": f"resp_{uuid.uuid4().hex}",
        "object": "response",
        "created_at": int(time.time()),
        "model": request.model,
        "status": status,
        "incomplete_details": None if status == "completed" else {"reason": "max_output_tokens"},
        "instructions": request.instructions,
        "output": [message],
        "parallel_tool_calls": True,
        "temperature": 1.0,
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "background": False,
        "max_output_tokens": request.max_output_tokens,
        "previous_response_id": None,
        "reasoning": None,
        "service_tier": "auto",
        "text": None,
        "truncation": "disabled",
        "usage": {
            "input_tokens": request.prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": request.prompt_tokens + output_tokens,
        },
        "user": None,
    }
