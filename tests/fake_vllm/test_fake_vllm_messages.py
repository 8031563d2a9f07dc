"""Anthropic's Messages API, batch chat, and the routes vLLM 0.32 serves but refuses.

The shapes are vLLM 0.32's, as ``tests/vllm/test_contract.py`` finds them on the real
server; here the fake's own details (stop sequences, pacing, token counts) are pinned.
"""

from __future__ import annotations

import json

import httpx
import pytest
from fake_vllm_helpers import StartLane

HI = [{"role": "user", "content": "hi there"}]


def _events(body: str) -> list[tuple[str, dict[str, object]]]:
    """Anthropic's named SSE events: (event, data) each."""
    events = []
    for block in body.split("\n\n"):
        if block:
            name, data = block.split("\n")
            assert name.startswith("event: ") and data.startswith("data: "), block
            events.append((name[7:], json.loads(data[6:])))
    return events


async def test_messages_answers_one_text_block(
    start_lane: StartLane, client: httpx.AsyncClient
) -> None:
    url = await start_lane(model="/m", served_model_names=("m",))
    body = {"model": "m", "max_tokens": 4, "system": "be brief", "messages": HI}
    answer = (await client.post(url + "/v1/messages", json=body)).json()
    assert answer["type"] == "message" and answer["role"] == "assistant"
    assert answer["model"] == "m" and answer["stop_reason"] == "max_tokens"
    [block] = answer["content"]
    assert block["type"] == "text" and block["text"].startswith("[")
    assert answer["usage"] == {"input_tokens": 6, "output_tokens": 4}  # system + user words


async def test_messages_stream_is_named_events_without_done(
    start_lane: StartLane, client: httpx.AsyncClient
) -> None:
    url = await start_lane()
    body = {"max_tokens": 3, "stream": True, "messages": HI}
    response = await client.post(url + "/v1/messages", json=body)
    assert response.headers["content-type"].startswith("text/event-stream")
    events = _events(response.text)
    names = [name for name, _ in events]
    assert names == [
        "message_start", "content_block_start", *["content_block_delta"] * 3,
        "content_block_stop", "message_delta", "message_stop",
    ]  # fmt: skip
    assert all(data["type"] == name for name, data in events)
    assert events[-2][1]["usage"] == {"input_tokens": 3, "output_tokens": 3}
    assert "[DONE]" not in response.text


async def test_messages_refusals_in_vllms_two_shapes(
    start_lane: StartLane, client: httpx.AsyncClient
) -> None:
    url = await start_lane(model="m")
    missing = await client.post(url + "/v1/messages", json={"messages": HI})
    assert missing.status_code == 400
    assert missing.json()["error"]["param"] == "body.max_tokens"  # the request model's
    unknown = await client.post(
        url + "/v1/messages", json={"model": "nope", "max_tokens": 2, "messages": HI}
    )
    assert unknown.status_code == 404
    assert unknown.json() == {
        "type": "error",
        "error": {"type": "NotFoundError", "message": "The model `nope` does not exist."},
    }


async def test_count_tokens(start_lane: StartLane, client: httpx.AsyncClient) -> None:
    url = await start_lane()
    answer = await client.post(url + "/v1/messages/count_tokens", json={"messages": HI})
    assert answer.json() == {"input_tokens": 3, "context_management": {"original_input_tokens": 3}}


async def test_batch_answers_each_conversation_as_one_choice(
    start_lane: StartLane, client: httpx.AsyncClient
) -> None:
    url = await start_lane()
    conversations = [HI, [{"role": "user", "content": "other"}]]
    body = {"messages": conversations, "max_tokens": 2, "stream": True}  # stream: ignored
    answer = (await client.post(url + "/v1/chat/completions/batch", json=body)).json()
    assert answer["object"] == "chat.completion"
    assert [c["index"] for c in answer["choices"]] == [0, 1]
    texts = [c["message"]["content"] for c in answer["choices"]]
    assert texts[0] != texts[1]
    refused = await client.post(url + "/v1/chat/completions/batch", json={**body, "n": 2})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "n"


@pytest.mark.parametrize(
    "path", ["/v1/chat/completions/render", "/v1/completions/derender", "/v1/messages/render"]
)
async def test_scale_out_routes_are_refused_as_vllm_refuses_them(
    start_lane: StartLane, client: httpx.AsyncClient, path: str
) -> None:
    url = await start_lane()
    answer = await client.post(url + path, json={"messages": HI})
    assert answer.status_code == 403
    assert answer.json()["error"]["type"] == "PermissionDeniedError"
