"""vLLM's other routes, served names, LoRA adapters and API keys, over real sockets.

Shapes are checked against vLLM 0.34's protocol classes (field names and types) and,
where the route is OpenAI's, through the official ``openai`` client.
"""

from __future__ import annotations

import base64
import struct
from functools import partial

import httpx
import openai
import pytest
import trio
from fake_vllm_helpers import StartLane, validate
from prometheus_client.parser import text_string_to_metric_families

from ddsup.fake_vllm import LoraModule

ADAPTERS = (LoraModule("sql", "/loras/sql"), LoraModule("chat", "/loras/chat", "other-base"))


def _client(url: str, key: str = "x") -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0, timeout=10)


async def test_models_lists_served_names_and_adapters_with_parent(
    start_lane: StartLane, client: httpx.AsyncClient
) -> None:
    url = await start_lane(
        model="/models/llama", served_model_names=("llama", "llama-alias"),
        lora_modules=ADAPTERS, max_model_len=8192,
    )  # fmt: skip
    body = (await client.get(url + "/v1/models")).json()
    validate(body, "model_list")
    cards = [(m["id"], m["root"], m["parent"], m["max_model_len"]) for m in body["data"]]
    assert cards == [
        ("llama", "/models/llama", None, 8192),
        ("llama-alias", "/models/llama", None, 8192),
        ("sql", "/loras/sql", "llama", None),
        ("chat", "/loras/chat", "other-base", None),
    ]
    permission = body["data"][0]["permission"][0]
    assert permission["object"] == "model_permission" and permission["allow_sampling"] is True


@pytest.mark.parametrize(
    ("asked", "answered"),
    [("llama", "llama"), ("llama-alias", "llama"), (None, "llama"), ("sql", "sql")],
)
async def test_requests_by_alias_or_adapter(
    start_lane: StartLane, client: httpx.AsyncClient, asked: str | None, answered: str
) -> None:
    url = await start_lane(
        model="/models/llama", served_model_names=("llama", "llama-alias"), lora_modules=ADAPTERS
    )
    ask = {"prompt": "hi", "max_tokens": 2, **({"model": asked} if asked else {})}
    response = await client.post(url + "/v1/completions", json=ask)
    assert response.status_code == 200
    assert response.json()["model"] == answered  # vLLM answers with the first served name


async def test_an_unknown_model_is_a_404_on_every_route(
    start_lane: StartLane, client: httpx.AsyncClient
) -> None:
    url = await start_lane(model="m")
    for path, body in (
        ("/v1/completions", {"prompt": "x"}),
        ("/v1/embeddings", {"input": "x"}),
        ("/v1/responses", {"input": "x"}),
        ("/rerank", {"query": "q", "documents": ["d"]}),
        ("/tokenize", {"prompt": "x"}),
    ):
        response = await client.post(url + path, json={"model": "nope", **body})
        assert response.status_code == 404, path
        assert response.json()["error"]["message"] == "The model `nope` does not exist."


async def test_metrics_are_labelled_with_the_first_served_name(
    start_lane: StartLane, client: httpx.AsyncClient
) -> None:
    url = await start_lane(model="/models/x", served_model_names=("first", "second"))
    text = (await client.get(url + "/metrics")).text
    labels = {
        sample.labels["model_name"]
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    assert labels == {"first"}


async def test_api_keys_guard_v1_routes_like_vllm(
    start_lane: StartLane, client: httpx.AsyncClient
) -> None:
    url = await start_lane(model="m", api_keys=("k1", "k2"))
    assert (await client.get(url + "/v1/models")).status_code == 401
    denied = await client.get(url + "/v1/models", headers={"Authorization": "Bearer wrong"})
    assert (denied.status_code, denied.json()) == (401, {"error": "Unauthorized"})
    for key in ("k1", "k2"):
        ok = await client.get(url + "/v1/models", headers={"Authorization": f"bearer {key}"})
        assert ok.status_code == 200
    for path in ("/health", "/metrics", "/version"):  # outside /v1: open, as in vLLM
        assert (await client.get(url + path)).status_code == 200
    assert (await client.post(url + "/tokenize", json={"prompt": "a"})).status_code == 200
    done = await trio.to_thread.run_sync(
        lambda: _client(url, "k2").completions.create(model="m", prompt="a", max_tokens=1)
    )
    assert done.choices[0].text
    with pytest.raises(openai.AuthenticationError):
        await trio.to_thread.run_sync(lambda: _client(url, "bad").models.list())


def _embeddings(url: str) -> tuple[list[list[float]], int, str]:
    with _client(url) as client:
        done = client.embeddings.create(model="m", input=["a b", "c"], dimensions=8)
        packed = client.embeddings.create(model="m", input="a b", encoding_format="base64")
    return [d.embedding for d in done.data], done.usage.prompt_tokens, str(packed.data[0].embedding)


async def test_embeddings_through_the_openai_client(
    start_lane: StartLane, client: httpx.AsyncClient
) -> None:
    url = await start_lane(model="m")
    vectors, prompt_tokens, _ = await trio.to_thread.run_sync(partial(_embeddings, url))
    assert [len(v) for v in vectors] == [8, 8] and vectors[0] != vectors[1]
    assert abs(sum(x * x for x in vectors[0]) - 1) < 1e-6  # unit length (float32 on the wire)
    assert prompt_tokens == 3
    raw = (await client.post(url + "/v1/embeddings", json={"input": "a b"})).json()
    assert raw["object"] == "list" and raw["data"][0]["object"] == "embedding"
    assert raw["id"].startswith("embd-") and raw["model"] == "m"
    again = (await client.post(url + "/v1/embeddings", json={"input": "a b"})).json()
    assert again["data"] == raw["data"]  # deterministic
    packed = (
        await client.post(
            url + "/v1/embeddings", json={"input": "a b", "encoding_format": "base64"}
        )
    ).json()["data"][0]["embedding"]
    floats = struct.unpack(f"<{len(raw['data'][0]['embedding'])}f", base64.b64decode(packed))
    assert floats == pytest.approx(raw["data"][0]["embedding"], rel=1e-6)


def _responses(url: str) -> tuple[str, str, int, str]:
    with _client(url) as client:
        done = client.responses.create(
            model="m", input="tell me", instructions="be brief", max_output_tokens=4
        )
    usage = done.usage.output_tokens if done.usage else -1
    return done.output_text, done.status or "", usage, done.object


async def test_responses_through_the_openai_client(
    start_lane: StartLane, client: httpx.AsyncClient
) -> None:
    url = await start_lane(model="m", lane_id="L")
    text, status, output_tokens, kind = await trio.to_thread.run_sync(partial(_responses, url))
    assert text.startswith("[L]") and len(text.split()) == 4
    assert (status, output_tokens, kind) == ("incomplete", 4, "response")  # hit max tokens
    streamed = await client.post(url + "/v1/responses", json={"input": "x", "stream": True})
    assert streamed.status_code == 400 and "does not stream" in streamed.text


async def test_tokenize_and_detokenize_round_trip(
    start_lane: StartLane, client: httpx.AsyncClient
) -> None:
    url = await start_lane(model="m", max_model_len=1000)
    ask = {"prompt": "hello  big\nworld", "return_token_strs": True}
    body = (await client.post(url + "/tokenize", json=ask)).json()
    assert body["count"] == 3 and body["max_model_len"] == 1000
    assert body["token_strs"] == ["hello", "big", "world"]
    assert all(isinstance(t, int) and 0 <= t < 2**63 for t in body["tokens"])
    back = (await client.post(url + "/detokenize", json={"tokens": body["tokens"]})).json()
    assert back == {"prompt": "hello big world"}
    chat = {"messages": [{"role": "user", "content": "one two"}]}
    assert (await client.post(url + "/tokenize", json=chat)).json()["count"] == 2
    bad = await client.post(url + "/detokenize", json={"tokens": ["x"]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "tokens"


@pytest.mark.parametrize("path", ["/score", "/v1/score"])
async def test_score_shapes(start_lane: StartLane, client: httpx.AsyncClient, path: str) -> None:
    url = await start_lane(model="m")
    one_to_many = {"text_1": "q", "text_2": ["a", "b", "c"]}
    body = (await client.post(url + path, json=one_to_many)).json()
    assert body["object"] == "list" and body["model"] == "m"
    assert [(d["index"], d["object"]) for d in body["data"]] == [
        (0, "score"),
        (1, "score"),
        (2, "score"),
    ]
    assert all(0 <= d["score"] <= 1 for d in body["data"])
    pairs = {"queries": ["q", "q"], "documents": ["a", "b"]}
    same = (await client.post(url + path, json=pairs)).json()
    assert [d["score"] for d in same["data"]] == [d["score"] for d in body["data"][:2]]
    mismatch = await client.post(url + path, json={"text_1": ["a", "b"], "text_2": ["c"] * 3})
    assert mismatch.status_code == 400


@pytest.mark.parametrize("path", ["/rerank", "/v1/rerank", "/v2/rerank"])
async def test_rerank_shapes(start_lane: StartLane, client: httpx.AsyncClient, path: str) -> None:
    url = await start_lane(model="m")
    ask = {"query": "q", "documents": ["a", "b c", "d"], "top_n": 2}
    body = (await client.post(url + path, json=ask)).json()
    assert body["id"].startswith("rerank-") and body["model"] == "m"
    assert body["usage"] == {"prompt_tokens": 7, "total_tokens": 7}
    results = body["results"]
    assert len(results) == 2
    assert results[0]["relevance_score"] >= results[1]["relevance_score"]
    assert results[0]["document"]["text"] == ask["documents"][results[0]["index"]]


async def test_pooling_shape(start_lane: StartLane, client: httpx.AsyncClient) -> None:
    url = await start_lane(model="m")
    body = (await client.post(url + "/pooling", json={"input": ["a", "b"]})).json()
    assert body["id"].startswith("pool-") and body["object"] == "list"
    assert [(d["index"], d["object"], len(d["data"])) for d in body["data"]] == [
        (0, "pooling", 16),
        (1, "pooling", 16),
    ]


async def test_pooling_routes_queue_in_the_engine(
    start_lane: StartLane, client: httpx.AsyncClient
) -> None:
    """An embedding takes a sequence slot like a generation: vLLM schedules both."""
    url = await start_lane(model="m", max_num_seqs=1, ttft=0.3)
    async with trio.open_nursery() as nursery:
        for _ in range(2):
            nursery.start_soon(partial(client.post, url + "/v1/embeddings", json={"input": "a"}))
        with trio.fail_after(5):
            while await _waiting(client, url) != 1:  # noqa: ASYNC110 - the lane's gauge: poll
                await trio.sleep(0.02)


async def _waiting(client: httpx.AsyncClient, url: str) -> float:
    text = (await client.get(url + "/metrics")).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "vllm:num_requests_waiting":
                return sample.value
    raise AssertionError("no vllm:num_requests_waiting")
