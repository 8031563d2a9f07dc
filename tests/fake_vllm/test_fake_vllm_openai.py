"""The official ``openai`` client talks to the fake as it would to vLLM."""

from __future__ import annotations

from functools import partial

import openai
import trio
from fake_vllm_helpers import StartLane
from openai.types.chat import ChatCompletionMessageParam

MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hello there"}]


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=10)


def _completions(url: str) -> tuple[str, str, int]:
    with _client(url) as client:
        done = client.completions.create(model="m", prompt="a b c", max_tokens=4, n=2)
    return (
        done.choices[1].text,
        str(done.choices[0].finish_reason),
        done.usage.total_tokens if done.usage else -1,
    )


def _chat(url: str) -> tuple[str, str | None]:
    with _client(url) as client:
        done = client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=3)
    return done.choices[0].finish_reason, done.choices[0].message.content


def _chat_stream(url: str) -> tuple[str, list[str | None], int]:
    with _client(url) as client:
        stream = client.chat.completions.create(
            model="m",
            messages=MESSAGES,
            max_tokens=5,
            stream=True,
            stream_options={"include_usage": True},
        )
        text, tokens = "", -1
        reasons: list[str | None] = []
        for chunk in stream:
            if chunk.usage is not None:
                tokens = chunk.usage.completion_tokens
            for choice in chunk.choices:
                text += choice.delta.content or ""
                reasons.append(choice.finish_reason)
    return text, reasons, tokens


def _completion_stream(url: str) -> str:
    with _client(url) as client:
        stream = client.completions.create(model="m", prompt="p", max_tokens=4, stream=True)
        return "".join(c.choices[0].text for c in stream)


def _models(url: str) -> list[tuple[str, str]]:
    with _client(url) as client:
        return [(m.id, m.owned_by) for m in client.models.list()]


def _unknown_model(url: str) -> tuple[int, str]:
    with _client(url) as client:
        try:
            client.completions.create(model="other", prompt="p")
        except openai.NotFoundError as err:
            return err.status_code, err.message
    raise AssertionError("a request for an unknown model must fail")


async def test_openai_completions_and_models(start_lane: StartLane) -> None:
    url = await start_lane(model="m", lane_id="oa")
    text, reason, total = await trio.to_thread.run_sync(_completions, url)
    assert text.startswith("[oa] ")
    assert (reason, total) == ("length", 3 + 8)
    assert await trio.to_thread.run_sync(_models, url) == [("m", "vllm")]
    status, message = await trio.to_thread.run_sync(_unknown_model, url)
    assert status == 404
    assert "The model `other` does not exist." in message


async def test_openai_chat(start_lane: StartLane) -> None:
    url = await start_lane(model="m", lane_id="oa")
    reason, content = await trio.to_thread.run_sync(_chat, url)
    assert reason == "length"
    assert content is not None
    assert content.startswith("[oa]")
    assert len(content.split()) == 3


async def test_openai_streaming(start_lane: StartLane) -> None:
    url = await start_lane(model="m", lane_id="oa", ttft=0.05, tokens_per_second=200)
    text, reasons, tokens = await trio.to_thread.run_sync(_chat_stream, url)
    assert len(text.split()) == 5
    assert text.startswith("[oa]")
    assert reasons[-1] == "length"
    assert set(reasons[:-1]) == {None}
    assert tokens == 5
    streamed = await trio.to_thread.run_sync(_completion_stream, url)
    plain = await trio.to_thread.run_sync(partial(_plain_completion, url))
    assert streamed == plain


def _plain_completion(url: str) -> str:
    with _client(url) as client:
        return client.completions.create(model="m", prompt="p", max_tokens=4).choices[0].text
