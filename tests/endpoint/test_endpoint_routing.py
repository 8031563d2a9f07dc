"""Routing: lane choice (least outstanding, round robin), retries, admission, metrics."""

from __future__ import annotations

from typing import Any

import httpx
import trio
from endpoint_fakes import (
    FakeLane,
    Running,
    closed_port,
    http_client,
    running_endpoint,
    wait_until,
)

from ddsup.endpoint import LaneInfo


def completion(model: str = "m", **extra: Any) -> dict[str, Any]:
    return {"model": model, "prompt": "hi", **extra}


async def post(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> httpx.Response:
    return await client.post(f"{url}/v1/completions", json=body)


async def test_routes_by_model_and_lists_models(workers: int) -> None:
    lanes = [FakeLane("a", "llama"), FakeLane("b", "qwen")]
    async with running_endpoint(lanes, workers=workers) as ep, http_client() as client:
        for model, lane in (("llama", "a"), ("qwen", "b"), ("llama", "a")):
            response = await post(client, ep.url, completion(model))
            assert response.status_code == 200
            assert response.json()["lane"] == lane
        chat = await client.post(f"{ep.url}/v1/chat/completions", json={"model": "qwen"})
        embed = await client.post(f"{ep.url}/v1/embeddings", json={"model": "qwen"})
        assert (chat.status_code, embed.status_code) == (200, 200)
        assert [r.path for r in lanes[1].received] == [
            "/v1/completions",
            "/v1/chat/completions",
            "/v1/embeddings",
        ]
        models = (await client.get(f"{ep.url}/v1/models")).json()
        assert models["object"] == "list"
        assert sorted(m["id"] for m in models["data"]) == ["llama", "qwen"]
        assert all(m["object"] == "model" for m in models["data"])


async def test_least_outstanding_lane_gets_the_next_request(workers: int) -> None:
    lanes = [FakeLane("a"), FakeLane("b")]
    for lane in lanes:
        lane.hold = trio.Event()
    async with running_endpoint(lanes, workers=workers) as ep, http_client() as client:
        results: list[int] = []

        async def send() -> None:
            results.append((await post(client, ep.url, completion())).status_code)

        async with trio.open_nursery() as nursery:
            for n in range(1, 5):
                nursery.start_soon(send)
                # each request is held where it landed before the next is sent
                await _wait_total(lanes, n)
                counts = sorted(lane.completions for lane in lanes)
                # with both held, a lane never gets ahead by more than one
                assert counts[1] - counts[0] <= 1, counts
            assert [lane.completions for lane in lanes] == [2, 2]
            for lane in lanes:
                assert lane.hold is not None
                lane.hold.set()
        assert results == [200] * 4


async def test_busy_lane_is_avoided_while_others_are_idle(workers: int) -> None:
    a, b = FakeLane("a"), FakeLane("b")
    a.hold, b.hold = trio.Event(), trio.Event()
    async with running_endpoint([a, b], workers=workers) as ep, http_client() as client:
        done: list[str] = []
        first_done = trio.Event()

        async def send() -> None:
            done.append((await post(client, ep.url, completion())).json()["lane"])
            first_done.set()

        async with trio.open_nursery() as nursery:
            # one after the other: two workers choosing at the same instant may both take
            # the same idle lane (the documented bound, docs/cli.md "workers - 1")
            nursery.start_soon(send)
            await _wait_total([a, b], 1)  # held at its lane, counted in shared memory
            nursery.start_soon(send)
            await _wait_total([a, b], 2)
            assert (a.completions, b.completions) == (1, 1)
            b.hold.set()
            with trio.fail_after(5):
                await first_done.wait()
            b.hold = None
            # a still holds one request: every new one goes to idle b
            for _ in range(5):
                response = await post(client, ep.url, completion())
                assert response.json()["lane"] == "b"
            assert a.completions == 1
            a.hold.set()
        assert sorted(done) == ["a", "b"]


async def test_round_robin_on_ties(workers: int) -> None:
    lanes = [FakeLane("a"), FakeLane("b"), FakeLane("c")]
    async with running_endpoint(lanes, workers=workers) as ep, http_client() as client:
        order = [(await post(client, ep.url, completion())).json()["lane"] for _ in range(9)]
    for i in range(0, 9, 3):
        assert sorted(order[i : i + 3]) == ["a", "b", "c"], order


async def test_retries_distinct_lanes_on_retryable_answers(workers: int) -> None:
    lanes = [FakeLane("a"), FakeLane("b"), FakeLane("c")]
    lanes[0].status, lanes[1].status = 503, 429
    async with running_endpoint(lanes, retries=2, workers=workers) as ep, http_client() as client:
        for _ in range(6):
            response = await post(client, ep.url, completion())
            assert response.status_code == 200
            assert response.json()["lane"] == "c"
        # every request reached c once; a and b at most once per request
        assert lanes[2].completions == 6
        assert lanes[0].completions <= 6
        assert lanes[1].completions <= 6
        metrics = (await client.get(f"{ep.url}/metrics")).text
        assert 'ddsup_endpoint_retries_total{model="m"}' in metrics


async def test_a_lane_answering_500_is_retried_on_another(workers: int) -> None:
    """vLLM answers 500 for every request while its engine is dead (until its API server
    exits): nothing of it reached the client, and another lane serves the request."""
    dead, good = FakeLane("dead"), FakeLane("good")
    dead.status = 500
    async with running_endpoint([dead, good], workers=workers) as ep, http_client() as client:
        for _ in range(4):
            response = await post(client, ep.url, completion())
            assert response.status_code == 200
            assert response.json()["lane"] == "good"
        assert good.completions == 4
        assert dead.completions >= 1


async def test_retries_are_bounded_and_never_repeat_a_lane(workers: int) -> None:
    lanes = [FakeLane("a"), FakeLane("b"), FakeLane("c")]
    for lane in lanes:
        lane.status = 502
    async with running_endpoint(lanes, retries=1, workers=workers) as ep, http_client() as client:
        response = await post(client, ep.url, completion())
        assert response.status_code == 502
        error = response.json()["error"]
        assert error["type"] == "upstream_failed"
        assert error["code"] == 502
        assert len(error["attempts"]) == 2
        assert sorted(lane.completions for lane in lanes) == [0, 1, 1]
    lanes = [FakeLane("a"), FakeLane("b")]
    for lane in lanes:
        lane.status = 504
    async with running_endpoint(lanes, retries=5, workers=workers) as ep, http_client() as client:
        response = await post(client, ep.url, completion())
        assert response.status_code == 502
        assert [lane.completions for lane in lanes] == [1, 1]


async def test_non_retryable_answer_passes_through_untouched(workers: int) -> None:
    a, b = FakeLane("a"), FakeLane("b")
    a.status = b.status = 400
    async with running_endpoint([a, b], workers=workers) as ep, http_client() as client:
        response = await post(client, ep.url, completion())
        assert response.status_code == 400
        assert a.completions + b.completions == 1


async def test_refused_lane_costs_no_client_error(workers: int) -> None:
    good = FakeLane("good")
    dead = LaneInfo("dead", "m", f"http://127.0.0.1:{closed_port()}")
    async with (
        running_endpoint([good], extra=[dead], workers=workers) as ep,
        http_client() as client,
    ):
        for _ in range(6):
            response = await post(client, ep.url, completion())
            assert response.status_code == 200
        assert good.completions == 6
        metrics = (await client.get(f"{ep.url}/metrics")).text
        assert 'ddsup_endpoint_upstream_errors_total{lane="dead",kind="refused"}' in metrics


async def test_reset_and_timeout_before_answering_are_retried(workers: int) -> None:
    reset, slow, good = FakeLane("reset"), FakeLane("slow"), FakeLane("good")
    reset.reset = True
    slow.hang = True
    lanes = [reset, slow, good]
    async with (
        running_endpoint(lanes, upstream_timeout=0.3, workers=workers) as ep,
        http_client() as client,
    ):
        for _ in range(3):
            response = await post(client, ep.url, completion())
            assert response.status_code == 200
        assert good.completions == 3
        assert reset.completions >= 1
        assert slow.completions >= 1
        assert slow.completions <= 3


async def test_all_queues_full_answers_429_with_retry_after(workers: int) -> None:
    a, b = FakeLane("a"), FakeLane("b")
    a.hold = b.hold = trio.Event()
    async with (
        running_endpoint([a, b], max_queue_per_lane=1, retry_after=2.5, workers=workers) as ep,
        http_client() as client,
    ):
        async with trio.open_nursery() as nursery:
            # one after the other: two workers choosing at the same instant may both pick
            # the same lane (the documented bound, workers - 1), and the third would fit
            nursery.start_soon(post, client, ep.url, completion())
            await _wait_total([a, b], 1)
            nursery.start_soon(post, client, ep.url, completion())
            await _wait_total([a, b], 2)
            assert (a.completions, b.completions) == (1, 1)
            response = await post(client, ep.url, completion())
            assert response.status_code == 429
            assert response.headers["retry-after"] == "3"
            error = response.json()["error"]
            assert error["type"] == "overloaded"
            assert error["code"] == 429
            assert error["retry_after"] == 3
            assert isinstance(error["message"], str)
            a.hold.set()
        # room again: served
        assert (await post(client, ep.url, completion())).status_code == 200


async def test_lane_reporting_a_full_queue_is_skipped(workers: int) -> None:
    full, idle = FakeLane("full"), FakeLane("idle")
    full.waiting = 4
    async with (
        running_endpoint([full, idle], max_queue_per_lane=4, workers=workers) as ep,
        http_client() as client,
    ):
        await _wait_sampled(ep, "full", 4)
        for _ in range(4):
            assert (await post(client, ep.url, completion())).json()["lane"] == "idle"
        assert full.completions == 0
        idle.waiting = 9
        await _wait_sampled(ep, "idle", 9)
        response = await post(client, ep.url, completion())
        assert response.status_code == 429
        assert full.completions == 0


async def test_failed_or_missing_metrics_fall_back_and_recover(workers: int) -> None:
    a, b = FakeLane("a"), FakeLane("b")
    a.waiting = 50
    async with (
        running_endpoint([a, b], max_queue_per_lane=8, workers=workers) as ep,
        http_client() as client,
    ):
        await _wait_sampled(ep, "a", 50)
        assert {(await post(client, ep.url, completion())).json()["lane"] for _ in range(4)} == {
            "b"
        }
        a.metrics_status = 500  # /metrics breaks: the sample is dropped, a serves again
        await _wait_sampled(ep, "a", None)
        lanes = {(await post(client, ep.url, completion())).json()["lane"] for _ in range(4)}
        assert lanes == {"a", "b"}
        a.metrics_status = 200  # the next good sample counts again
        await _wait_sampled(ep, "a", 50)
        lanes = {(await post(client, ep.url, completion())).json()["lane"] for _ in range(4)}
        assert lanes == {"b"}
        a.waiting = None  # /metrics without the gauge: no sample either
        await _wait_sampled(ep, "a", None)
        lanes = {(await post(client, ep.url, completion())).json()["lane"] for _ in range(4)}
        assert lanes == {"a", "b"}


async def test_lane_table_changes_take_effect_at_once(workers: int) -> None:
    a, b = FakeLane("a"), FakeLane("b")
    async with running_endpoint([a, b], workers=workers) as ep, http_client() as client:
        ep.table.set_ready([b.info])
        await ep.synced()
        lanes = {(await post(client, ep.url, completion())).json()["lane"] for _ in range(4)}
        assert lanes == {"b"}
        ep.table.remove("b")
        await ep.synced()
        response = await post(client, ep.url, completion())
        assert response.status_code == 503
        assert response.json()["error"]["type"] == "no_ready_lane"
        health = await client.get(f"{ep.url}/health")
        assert health.status_code == 503
        assert health.json()["missing"] == ["m"]
        ep.table.add(a.info)
        await ep.synced()
        assert (await post(client, ep.url, completion())).json()["lane"] == "a"
        assert (await client.get(f"{ep.url}/health")).status_code == 200


async def _wait_total(lanes: list[FakeLane], n: int) -> None:
    with trio.fail_after(5):
        await wait_until(lanes, lambda: sum(lane.completions for lane in lanes) >= n)


async def _wait_sampled(ep: Running, instance: str, waiting: int | None) -> None:
    """Wait until the sampler recorded ``waiting`` for ``instance`` and every worker has it.

    A bounded poll: the sampler's recording has no event to await.
    """
    with trio.fail_after(5):
        while True:
            state = next(s for s in ep.table.states() if s.info.instance == instance)
            if state.waiting == waiting and state.sampled_at > float("-inf"):
                break
            await trio.sleep(0.01)
        await ep.synced()
