"""How a generated answer goes out, per API: its whole body, or its stream event by event.

One generation request runs the same way whatever its API (queue for an engine slot,
"generate" its tokens at the configured pace, count it); what differs is the bytes:
OpenAI's ``text_completion``/``chat.completion`` chunks ending in ``[DONE]``
(:class:`OpenAIAnswer`), vLLM's batch of chat conversations (:class:`BatchAnswer`, not
streamed), and Anthropic's message events (:class:`MessagesAnswer`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ddsup.fake_vllm._messages_api import MessagesWriter, message_body, new_message_id
from ddsup.fake_vllm._request import GenerationRequest
from ddsup.fake_vllm._responses import DONE, ChunkWriter, dumps, full_response
from ddsup.fake_vllm._text import ChoiceText

SSE = b"text/event-stream; charset=utf-8"


class Answer(Protocol):
    """The bytes of one answer; a stream is ``opening``, each ``step``, then ``closing``."""

    request: GenerationRequest
    choices: Sequence[ChoiceText]

    def opening(self) -> list[bytes]: ...

    def step(self, step: int) -> list[bytes]: ...

    def closing(self) -> bytes: ...

    def whole(self) -> bytes: ...


class OpenAIAnswer:
    """``/v1/completions`` and ``/v1/chat/completions``."""

    def __init__(self, request: GenerationRequest, choices: Sequence[ChoiceText]) -> None:
        self.request = request
        self.choices = choices
        self._writer = ChunkWriter(request) if request.stream else None

    def opening(self) -> list[bytes]:
        assert self._writer is not None
        if not self.request.chat:
            return []
        return [self._writer.role(index) for index in range(len(self.choices))]

    def step(self, step: int) -> list[bytes]:
        assert self._writer is not None
        events = []
        for index, choice in enumerate(self.choices):
            if step >= choice.completion_tokens:
                continue
            last = step == choice.completion_tokens - 1
            if choice.deltas[step] or last:
                events.append(
                    self._writer.delta(index, choice.deltas[step], choice if last else None)
                )
        return events

    def closing(self) -> bytes:
        assert self._writer is not None
        usage = self._writer.usage(self.choices) if self.request.include_usage else b""
        return usage + DONE

    def whole(self) -> bytes:
        return dumps(full_response(self.request, self.choices))


class BatchAnswer(OpenAIAnswer):
    """``/v1/chat/completions/batch``: one ``chat.completion`` whose choice ``i`` answers
    conversation ``i`` (vLLM refuses ``stream`` there)."""


class MessagesAnswer:
    """``/v1/messages``: one ``message``, or its named events."""

    def __init__(self, request: GenerationRequest, choices: Sequence[ChoiceText]) -> None:
        self.request = request
        self.choices = choices
        self._writer = MessagesWriter(request, new_message_id())

    def opening(self) -> list[bytes]:
        return [self._writer.start()]

    def step(self, step: int) -> list[bytes]:
        [choice] = self.choices
        text = choice.deltas[step] if step < choice.completion_tokens else ""
        return [self._writer.delta(text)] if text else []

    def closing(self) -> bytes:
        return self._writer.end(self.choices[0])

    def whole(self) -> bytes:
        return dumps(message_body(self.request, self.choices[0], self._writer.message_id))
