"""Routing by model on every vLLM route, by every name a lane answers to."""

from __future__ import annotations

import json
from dataclasses import replace

import httpx
import openai
import pytest
import trio
from endpoint_fakes import TEST_CONFIG, FakeLane, http_client, running_endpoint
from openai.types.chat import ChatCompletionMessageParam
from test_endpoint_fake_vllm import fake_vllm

from ddsup.endpoint import LaneInfo, LaneTable, open_endpoint
from ddsup.endpoint._api_errors import ApiError
from ddsup.endpoint._model_field import json_request, model_of_form
from ddsup.endpoint._route_table import FORM_ROUTES, JSON_ROUTES, ROUTES
from ddsup.units._schema import ENDPOINT_ROUTES


def test_the_units_layer_knows_the_endpoints_routes() -> None:
    assert {route.encode() for route in ENDPOINT_ROUTES} == ROUTES


async def test_every_route_is_routed_by_the_bodys_model(workers: int) -> None:
    llama, qwen = FakeLane("llama@0", "llama"), FakeLane("qwen@0", "qwen")
    async with running_endpoint([llama, qwen], workers=workers) as ep, http_client() as client:
        for route in sorted(JSON_ROUTES):
            for lane in (llama, qwen):
                response = await client.post(
                    f"{ep.url}{route.decode()}", json={"model": lane.model}
                )
                assert response.status_code == 200, route
                assert lane.received[-1].path == route.decode()
        for route in sorted(FORM_ROUTES):
            files = {"file": ("a.wav", b"RIFF....WAVE" * 100, "audio/wav")}
            response = await client.post(
                f"{ep.url}{route.decode()}", data={"model": "qwen"}, files=files
            )
            assert response.status_code == 200, route
            assert qwen.received[-1].path == route.decode()
            assert b"RIFF....WAVE" in qwen.received[-1].body  # passed on as it came
        assert (await client.get(f"{ep.url}/v1/embeddings")).status_code == 405
    assert len(llama.received) == len(JSON_ROUTES)


async def test_a_request_without_a_model_goes_to_the_one_model_served(workers: int) -> None:
    lane = FakeLane("a", "only")
    async with running_endpoint([lane], workers=workers) as ep, http_client() as client:
        response = await client.post(f"{ep.url}/tokenize", json={"prompt": "hi"})
        assert response.status_code == 200 and lane.received[-1].path == "/tokenize"
        ep.table.declare_models(["other"])
        await ep.synced()
        ambiguous = await client.post(f"{ep.url}/tokenize", json={"prompt": "hi"})
        assert ambiguous.status_code == 400
        assert "only, other" in ambiguous.json()["error"]["message"]


async def test_aliases_and_adapters_route_to_the_lanes_that_serve_them(workers: int) -> None:
    adapted, plain = FakeLane("adapted", "llama"), FakeLane("plain", "llama")
    adapted.names = ["llama-chat", "sql-lora"]
    async with running_endpoint([adapted, plain], workers=workers) as ep, http_client() as client:
        url = f"{ep.url}/v1/completions"
        for _ in range(3):
            assert (await client.post(url, json={"model": "sql-lora"})).status_code == 200
        assert {r.path for r in plain.received} == set()  # only the lane with the adapter
        for _ in range(4):
            assert (await client.post(url, json={"model": "llama"})).status_code == 200
        assert len(plain.received) == 2  # the model itself: both lanes
        listed = (await client.get(f"{ep.url}/v1/models")).json()
        assert [m["id"] for m in listed["data"]] == ["llama", "llama-chat", "sql-lora"]
        unknown = await client.post(url, json={"model": "nope"})
        assert unknown.status_code == 404
        assert "llama-chat" in unknown.json()["error"]["message"]
        ep.table.set_ready([plain.info])  # the adapter's lane leaves: its names stay known
        await ep.synced()
        gone = await client.post(url, json={"model": "sql-lora"})
        assert gone.status_code == 503 and gone.json()["error"]["type"] == "no_ready_lane"


async def test_health_waits_until_a_new_lanes_names_are_known(workers: int) -> None:
    lane = FakeLane("a", "m")
    lane.names = ["alias"]
    late = FakeLane("late", "m")
    late.names = ["late-alias"]
    async with (
        running_endpoint([lane], workers=workers) as ep,
        trio.open_nursery() as nursery,
        http_client() as client,
    ):
        await nursery.start(late.serve)
        ep.table.add(LaneInfo("late", "m", f"http://127.0.0.1:{late.port}"))
        with trio.fail_after(5):
            while (await client.get(f"{ep.url}/health")).status_code != 200:  # noqa: ASYNC110
                await trio.sleep(0.02)  # bounded poll: the endpoint asks the new lane
        response = await client.post(f"{ep.url}/v1/completions", json={"model": "late-alias"})
        assert response.status_code == 200 and late.completions == 1
        nursery.cancel_scope.cancel()


async def test_the_openai_client_through_fake_vllm_lanes_with_aliases_and_lora(
    workers: int,
) -> None:
    """Real fake-vllm lanes: names from their own /v1/models; the stock openai client."""
    lora = ("--enable-lora", "--lora-modules", "sql-lora=/adapters/sql")
    async with (
        fake_vllm("meta/llama", "--served-model-name", "llama", "llama-chat", *lora) as one,
        fake_vllm("meta/llama", "--served-model-name", "llama", "llama-chat") as two,
    ):
        table = LaneTable([LaneInfo("one", "llama", one), LaneInfo("two", "llama", two)])
        config = replace(TEST_CONFIG, workers=workers)
        async with open_endpoint(config, table) as serving:
            base = f"http://127.0.0.1:{serving.port}"
            await trio.to_thread.run_sync(_through_openai, f"{base}/v1")  # the sync client
            async with httpx.AsyncClient(base_url=base) as http:
                for route, body in (
                    ("/tokenize", {"model": "llama-chat", "prompt": "hello there"}),
                    ("/v1/score", {"model": "llama", "text_1": "a", "text_2": ["b", "c"]}),
                    ("/rerank", {"model": "llama", "query": "q", "documents": ["x", "y"]}),
                    ("/pooling", {"model": "llama", "input": "hi"}),
                ):
                    response = await http.post(route, json=body)
                    assert response.status_code == 200, (route, response.text)
                missing = await http.post("/v1/completions", json={"model": "nope", "prompt": "x"})
                assert missing.status_code == 404


def _through_openai(base_url: str) -> None:
    """The stock openai client, as a worker would use it, by every name the lanes serve."""
    with openai.OpenAI(base_url=base_url, api_key="unused") as client:
        names = sorted(m.id for m in client.models.list())
        assert names == ["llama", "llama-chat", "sql-lora"]
        for name in names:
            done = client.completions.create(model=name, prompt="hi", max_tokens=3)
            assert done.choices[0].text
            assert done.model == ("sql-lora" if name == "sql-lora" else "llama")
        messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]
        chat = client.chat.completions.create(model="llama-chat", messages=messages, max_tokens=3)
        assert chat.choices[0].message.content
        with client.chat.completions.create(
            model="sql-lora", messages=messages, max_tokens=4, stream=True
        ) as stream:
            pieces = [c.choices[0].delta.content or "" for c in stream if c.choices]
        assert "".join(pieces)
        vectors = client.embeddings.create(model="llama", input=["a", "b"])
        assert len(vectors.data) == 2


@pytest.mark.parametrize(
    ("content_type", "body", "model"),
    [
        (
            b"multipart/form-data; boundary=XyZ",
            b'--XyZ\r\nContent-Disposition: form-data; name="file"; filename="model"\r\n\r\n'
            b'ignored\r\n--XyZ\r\nContent-Disposition: form-data; name="model"\r\n\r\n'
            b"whisper\r\n--XyZ--\r\n",
            "whisper",
        ),
        (b'multipart/form-data; boundary="b"', b"--b\r\n\r\nno headers\r\n--b--\r\n", None),
    ],
)
def test_the_model_of_a_form(content_type: bytes, body: bytes, model: str | None) -> None:
    assert model_of_form(body, content_type) == model


@pytest.mark.parametrize(
    "body",
    [
        b'{"model": "m", "prompt": "hi"}',
        b'{"model": "m"} \t\r\n',  # whitespace after the object is JSON's too
        b'{"model": "m"} {"model": "n"}',  # two objects: not one body
        b'{"model": "m"}x',
        b'{"model": "m"}\x0c',  # a form feed is not JSON whitespace
        b'{"model": ',
        b"{",
        b'{"model": "\xc3\xa9t\xc3\xa9", "n": NaN}',
        b'{"model": "m", "model": "n"}',  # the last one wins, as in json.loads
        b'{"model": "\\ud800"}',  # a lone surrogate, escaped: JSON allows it
        b"{}",
    ],
)
def test_a_json_bodys_model_is_json_loads_verdict(body: bytes) -> None:
    try:
        expected: object = json.loads(body)
    except ValueError as err:
        why = str(err)
    else:
        assert isinstance(expected, dict)
        assert json_request(body) == (expected.get("model"), expected)
        return
    with pytest.raises(ApiError) as refused:
        json_request(body)
    assert refused.value.status == 400
    assert f"not valid JSON: {why}" in refused.value.body().decode()


def test_a_deeply_nested_json_object_is_a_clear_400() -> None:
    with pytest.raises(ApiError) as refused:
        json_request(b'{"a": ' * 100_000)
    assert refused.value.status == 400 and b"nested too deeply" in refused.value.body()


async def test_a_query_string_is_routed_by_the_path_and_passed_on() -> None:
    lane = FakeLane("a", "llama")
    async with running_endpoint([lane]) as ep, http_client() as client:
        response = await client.post(
            f"{ep.url}/v1/completions?stream_options=x", json={"model": "llama"}
        )
        assert response.status_code == 200
        assert lane.received[-1].path == "/v1/completions?stream_options=x"
        assert (await client.get(f"{ep.url}/health?verbose=1")).status_code == 200
        assert (await client.get(f"{ep.url}/v1/completions?x")).status_code == 405
