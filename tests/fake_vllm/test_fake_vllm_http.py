"""vLLM's HTTP surface of an in-process fake lane, over real loopback sockets."""

from __future__ import annotations

import json
from functools import partial

import httpx
import pytest
import trio
import trio.testing
from fake_vllm_helpers import Crashes, StartLane, sse_events, validate
from prometheus_client.parser import text_string_to_metric_families

CHAT = [{"role": "user", "content": "Say something"}]


async def test_health_ping_and_lane_header(
    start_lane: StartLane, client: httpx.AsyncClient
) -> None:
    url = await start_lane(lane_id="lane-a")
    for path in ("/health", "/ping"):
        response = await client.get(url + path)
        assert response.status_code == 200
        assert response.content == b""
        assert response.headers["x-fake-vllm-lane"] == "lane-a"


async def test_lane_id_defaults_to_the_port(
    start_lane: StartLane, client: httpx.AsyncClient
) -> None:
    url = await start_lane()
    response = await client.post(url + "/v1/completions", json={"prompt": "hi", "max_tokens": 1})
    port = url.rsplit(":", 1)[1]
    assert response.headers["x-fake-vllm-lane"] == port
    assert response.json()["choices"][0]["text"] == f"[{port}]"


async def test_models_list(start_lane: StartLane, client: httpx.AsyncClient) -> None:
    url = await start_lane(model="llama-8b", max_model_len=2048)
    body = (await client.get(url + "/v1/models")).json()
    validate(body, "model_list")
    assert [(m["id"], m["root"], m["max_model_len"]) for m in body["data"]] == [
        ("llama-8b", "llama-8b", 2048)
    ]


async def test_completion_shape_n_and_max_tokens(
    start_lane: StartLane, client: httpx.AsyncClient
) -> None:
    url = await start_lane(model="m")
    response = await client.post(
        url + "/v1/completions",
        json={"model": "m", "prompt": "one two three", "n": 3, "max_tokens": 5},
    )
    assert response.status_code == 200
    body = response.json()
    validate(body, "completion")
    assert [c["index"] for c in body["choices"]] == [0, 1, 2]
    assert all(c["finish_reason"] == "length" for c in body["choices"])
    assert all(len(c["text"].split()) == 5 for c in body["choices"])  # one word a token
    assert body["usage"] == {
        "prompt_tokens": 3,
        "completion_tokens": 15,
        "total_tokens": 18,
        "prompt_tokens_details": None,
    }


async def test_chat_shape_and_max_completion_tokens(
    start_lane: StartLane, client: httpx.AsyncClient
) -> None:
    url = await start_lane(model="m", default_max_tokens=7)
    response = await client.post(
        url + "/v1/chat/completions",
        json={"model": "m", "messages": CHAT, "max_completion_tokens": 3},
    )
    body = response.json()
    validate(body, "chat_completion")
    assert body["usage"]["completion_tokens"] == 3
    default = (await client.post(url + "/v1/chat/completions", json={"messages": CHAT})).json()
    assert default["usage"]["completion_tokens"] == 7


async def test_stop_string_cuts_the_text(start_lane: StartLane, client: httpx.AsyncClient) -> None:
    url = await start_lane(lane_id="L")
    full = (
        await client.post(url + "/v1/completions", json={"prompt": "p", "max_tokens": 8})
    ).json()
    text = full["choices"][0]["text"]
    stop = text.split()[3]  # the fourth word always follows "[L] w1 w2 "
    cut = (
        await client.post(
            url + "/v1/completions", json={"prompt": "p", "max_tokens": 8, "stop": [stop]}
        )
    ).json()
    choice = cut["choices"][0]
    assert choice["text"] == text[: text.index(stop)]
    assert (choice["finish_reason"], choice["stop_reason"]) == ("stop", stop)
    assert cut["usage"]["completion_tokens"] < 8


async def test_same_prompt_same_text_per_lane(
    start_lane: StartLane, client: httpx.AsyncClient
) -> None:
    first = await start_lane(lane_id="A")
    second = await start_lane(lane_id="B")
    ask = {"prompt": "the same prompt", "max_tokens": 6}

    async def text(url: str, prompt: str = "the same prompt") -> str:
        body = (await client.post(url + "/v1/completions", json=dict(ask, prompt=prompt))).json()
        return str(body["choices"][0]["text"])

    assert await text(first) == await text(first)
    assert (await text(first)).startswith("[A] ")
    assert (await text(second)).startswith("[B] ")
    assert (await text(first)).split()[1:] == (await text(second)).split()[1:]
    assert await text(first) != await text(first, "another prompt")


async def test_stream_completion_chunks(start_lane: StartLane, client: httpx.AsyncClient) -> None:
    url = await start_lane(lane_id="S")
    ask = {"prompt": "stream me", "max_tokens": 4, "n": 2}
    response = await client.post(
        url + "/v1/completions", json=dict(ask, stream=True, stream_options={"include_usage": True})
    )
    assert response.headers["content-type"].startswith("text/event-stream")
    events = sse_events(response.text)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    for chunk in chunks:
        validate(chunk, "completion_chunk")
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == 8
    assert len({c["id"] for c in chunks}) == 1
    plain = (await client.post(url + "/v1/completions", json=ask)).json()
    for index in (0, 1):
        mine = [ch for c in chunks for ch in c["choices"] if ch["index"] == index]
        assert "".join(ch["text"] for ch in mine) == plain["choices"][index]["text"]
        assert [ch["finish_reason"] for ch in mine] == [None, None, None, "length"]


async def test_stream_chat_chunks(start_lane: StartLane, client: httpx.AsyncClient) -> None:
    url = await start_lane()
    response = await client.post(
        url + "/v1/chat/completions", json={"messages": CHAT, "max_tokens": 3, "stream": True}
    )
    events = sse_events(response.text)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    for chunk in chunks:
        validate(chunk, "chat_chunk")
        assert "usage" not in chunk  # include_usage was not asked for
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert len(chunks) == 1 + 3


@pytest.mark.parametrize(
    ("body", "status", "err_type", "param"),
    [
        ({"model": "nope", "prompt": "x"}, 404, "NotFoundError", "model"),
        ({"prompt": 5}, 400, "Bad Request", "body.prompt"),
        ({}, 400, "BadRequestError", "prompt"),
        ({"prompt": "x", "n": 0}, 400, "BadRequestError", None),
        ({"prompt": "x", "n": "a"}, 400, "Bad Request", "body.n"),
        ({"prompt": "x", "max_tokens": 0}, 400, "BadRequestError", "max_tokens"),
        ({"prompt": "x", "max_tokens": 10_000}, 400, "BadRequestError", "max_tokens"),
        (
            {"prompt": "x", "stream_options": {"include_usage": True}},
            400,
            "BadRequestError",
            "stream_options",
        ),
        ({"prompt": "x", "stop": 3}, 400, "Bad Request", "body.stop"),
    ],
)
async def test_invalid_requests(
    start_lane: StartLane,
    client: httpx.AsyncClient,
    body: dict[str, object],
    status: int,
    err_type: str,
    param: str | None,
) -> None:
    """Each refusal in vLLM 0.32's words: its request model's ("Bad Request", the field's
    location) or its own checks' ("BadRequestError")."""
    url = await start_lane(model="served")
    response = await client.post(url + "/v1/completions", json=body)
    assert response.status_code == status
    error = response.json()
    validate(error, "error")
    assert (error["error"]["type"], error["error"]["code"], error["error"]["param"]) == (
        err_type,
        status,
        param,
    )


async def test_bad_json_and_unknown_routes(
    start_lane: StartLane, client: httpx.AsyncClient
) -> None:
    url = await start_lane()
    bad = await client.post(url + "/v1/chat/completions", content=b"{not json")
    assert bad.status_code == 400
    validate(bad.json(), "error")
    assert bad.json()["error"]["type"] == "Bad Request"  # vLLM: its request model refused it
    assert "JSON decode error" in bad.json()["error"]["message"]
    no_messages = await client.post(url + "/v1/chat/completions", json={"messages": []})
    assert no_messages.status_code == 400
    assert (await client.get(url + "/v2/nothing")).status_code == 404
    assert (await client.get(url + "/v1/completions")).status_code == 405


async def test_fail_health(start_lane: StartLane, client: httpx.AsyncClient) -> None:
    url = await start_lane(fail_health=True)
    assert (await client.get(url + "/health")).status_code == 503
    later = await start_lane(fail_health_after=0.2)
    assert (await client.get(later + "/health")).status_code == 200
    with trio.fail_after(5):
        # the lane turns unhealthy by its own clock: poll it, bounded
        while (await client.get(later + "/health")).status_code == 200:  # noqa: ASYNC110
            await trio.sleep(0.05)


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _gauge(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str) -> float:
    return samples[(name, (("engine", "0"), ("model_name", "m")))]


async def test_metrics_parse_and_count(start_lane: StartLane, client: httpx.AsyncClient) -> None:
    url = await start_lane(model="m")
    await client.post(url + "/v1/completions", json={"prompt": "a b", "max_tokens": 2})
    response = await client.get(url + "/metrics")
    assert response.headers["content-type"].startswith("text/plain")
    samples = _samples(response.text)
    assert _gauge(samples, "vllm:num_requests_running") == 0
    assert _gauge(samples, "vllm:num_requests_waiting") == 0
    assert _gauge(samples, "vllm:kv_cache_usage_perc") == 0
    assert _gauge(samples, "vllm:generation_tokens_total") == 2
    key = ("engine", "0"), ("finished_reason", "length"), ("model_name", "m")
    assert samples[("vllm:request_success_total", key)] == 1


async def test_queueing_shows_in_metrics(start_lane: StartLane, client: httpx.AsyncClient) -> None:
    url = await start_lane(model="m", max_num_seqs=2, ttft=30)
    async with trio.open_nursery() as nursery:
        for _ in range(5):
            nursery.start_soon(partial(client.post, url + "/v1/completions", json={"prompt": "x"}))
        with trio.fail_after(5):
            while True:  # the requests are in another process's hands: poll, bounded
                samples = _samples((await client.get(url + "/metrics")).text)
                if _gauge(samples, "vllm:num_requests_waiting") == 3:
                    break
                await trio.sleep(0.02)
        assert _gauge(samples, "vllm:num_requests_running") == 2
        assert _gauge(samples, "vllm:kv_cache_usage_perc") == 1.0
        nursery.cancel_scope.cancel()  # the clients leave: the lane must free every slot
    with trio.fail_after(5):
        while True:
            samples = _samples((await client.get(url + "/metrics")).text)
            running = _gauge(samples, "vllm:num_requests_running")
            if running == 0 and _gauge(samples, "vllm:num_requests_waiting") == 0:
                break
            await trio.sleep(0.02)
    key = ("engine", "0"), ("finished_reason", "abort"), ("model_name", "m")
    assert samples[("vllm:request_success_total", key)] == 5


async def test_fifo_and_token_timing(start_lane: StartLane, client: httpx.AsyncClient) -> None:
    """One slot, ttft 0.1 s, 20 tok/s, 3 tokens: each request takes ~0.2 s, in order."""
    url = await start_lane(max_num_seqs=1, ttft=0.1, tokens_per_second=20)
    finished: list[int] = []
    start = trio.current_time()

    async def ask(i: int) -> None:
        await client.post(url + "/v1/completions", json={"prompt": str(i), "max_tokens": 3})
        finished.append(i)

    async with trio.open_nursery() as nursery:
        for i in range(3):
            nursery.start_soon(ask, i)
            await trio.sleep(0.02)  # stagger the arrivals so the FIFO order is known
    elapsed = trio.current_time() - start
    assert finished == [0, 1, 2]
    assert 0.6 <= elapsed < 5.0  # a loaded CI box may be slow, never fast


async def test_crash_after_requests_in_process(
    start_lane: StartLane, client: httpx.AsyncClient, crashes: Crashes
) -> None:
    url = await start_lane(crash_after_requests=2)
    await client.post(url + "/v1/completions", json={"prompt": "x"})
    assert crashes.reasons == []
    await client.post(url + "/v1/completions", json={"prompt": "x"})
    await trio.testing.wait_all_tasks_blocked()  # the lane counts after the answer is out
    assert crashes.reasons == ["--crash-after-requests 2 reached"]
