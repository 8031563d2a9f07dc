"""vLLM's routes the endpoint answers itself, in vLLM's shapes: /ping, /version, /v1/models,
and the members of its error objects."""

from __future__ import annotations

from endpoint_fakes import FakeLane, http_client, running_endpoint

from ddsup.endpoint._route_table import JSON_ROUTES


def test_vllms_batch_render_and_scoring_routes_are_forwarded() -> None:
    for route in (
        b"/v1/chat/completions/batch", b"/generative_scoring", b"/v1/systemone",
        b"/v1/chat/completions/render", b"/v1/completions/derender", b"/inference/v1/generate",
    ):  # fmt: skip
        assert route in JSON_ROUTES


async def test_ping_answers_as_health_to_get_and_post(workers: int) -> None:
    lane = FakeLane("a", "llama")
    async with running_endpoint([lane], workers=workers) as ep, http_client() as client:
        health = await client.get(f"{ep.url}/health")
        for ping in (await client.get(f"{ep.url}/ping"), await client.post(f"{ep.url}/ping")):
            assert (ping.status_code, ping.json()) == (200, health.json())
        ep.table.declare_models(["qwen"])
        await ep.synced()
        assert (await client.post(f"{ep.url}/ping")).status_code == 503  # qwen has no lane
        wrong = await client.delete(f"{ep.url}/ping")
        assert (wrong.status_code, wrong.headers["allow"]) == (405, "GET, HEAD, POST")
    assert lane.received == []  # about the endpoint: no lane was asked


async def test_version_is_a_ready_lanes(workers: int) -> None:
    lane = FakeLane("a", "llama")
    async with running_endpoint([lane], workers=workers) as ep, http_client() as client:
        version = await client.get(f"{ep.url}/version")
        assert version.status_code == 200
        assert version.json()["lane"] == "a"  # the fake lane's answer, passed on
        head = await client.head(f"{ep.url}/version")
        assert (head.status_code, head.headers["allow"]) == (405, "GET")  # as vLLM's


async def test_models_cards_have_vllms_members(workers: int) -> None:
    lane = FakeLane("a", "llama")
    lane.names = ["llama-alias"]
    async with running_endpoint([lane], workers=workers) as ep, http_client() as client:
        body = (await client.get(f"{ep.url}/v1/models")).json()
    assert body["object"] == "list"
    assert [card["id"] for card in body["data"]] == ["llama", "llama-alias"]
    for card in body["data"]:
        assert set(card) == {
            "id", "object", "created", "owned_by", "root", "parent", "max_model_len", "permission",
        }  # fmt: skip
        assert card["object"] == "model" and card["owned_by"] == "vllm" and card["created"] > 0


async def test_error_objects_have_vllms_members(workers: int) -> None:
    lane = FakeLane("a", "llama")
    async with running_endpoint([lane], workers=workers) as ep, http_client() as client:
        unknown = await client.post(f"{ep.url}/v1/chat/completions", json={"model": "nope"})
        missing = await client.get(f"{ep.url}/no/route")
    assert unknown.status_code == 404
    assert set(unknown.json()["error"]) == {"message", "type", "param", "code"}
    assert unknown.json()["error"]["param"] == "model"
    assert missing.json()["error"]["param"] is None
