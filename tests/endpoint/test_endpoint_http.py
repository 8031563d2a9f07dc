"""The endpoint's HTTP behaviour: typed errors, hostile clients, streaming, limits."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from endpoint_fakes import FakeLane, http_client, running_endpoint
from prometheus_client.parser import text_string_to_metric_families

import ddsup.endpoint
from ddsup.endpoint import _routes


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


async def raw_exchange(url: str, data: bytes) -> bytes:
    """Send ``data`` on a new connection and read until the endpoint closes it."""
    stream = await trio.open_tcp_stream("127.0.0.1", port_of(url))
    async with stream:
        await stream.send_all(data)
        received = b""
        with trio.fail_after(5):
            while chunk := await stream.receive_some(65536):
                received += chunk
    return received


async def read_stream(
    client: httpx.AsyncClient, url: str, body: dict[str, Any], into: list[bytes]
) -> None:
    """POST ``body`` and collect the streamed response into ``into`` as it arrives."""
    async with client.stream("POST", url, json=body) as response:
        assert response.status_code == 200
        async for data in response.aiter_raw():
            into.append(data)


def error_of(response: httpx.Response) -> dict[str, Any]:
    assert response.headers["content-type"] == "application/json"
    error: dict[str, Any] = response.json()["error"]
    assert error["code"] == response.status_code
    assert error["message"]
    return error


def test_public_surface_is_pinned() -> None:
    assert set(ddsup.endpoint.__all__) == {
        "EndpointConfig",
        "LaneInfo",
        "LaneTable",
        "Serving",
        "configure_endpoint",
        "open_endpoint",
        "run_endpoint",
        "serve",
        "serve_endpoint",
    }


async def test_typed_errors(workers: int) -> None:
    lane = FakeLane("a", "llama")
    async with (
        running_endpoint([lane], max_body_bytes=1000, workers=workers) as ep,
        http_client() as client,
    ):
        ep.table.declare_models(["qwen"])
        await ep.synced()
        url = f"{ep.url}/v1/completions"
        cases = [
            (await client.post(url, json={"model": "nope"}), 404, "model_not_found"),
            (await client.post(url, content=b"{not json"), 400, "invalid_request_error"),
            (await client.post(url, json=["model"]), 400, "invalid_request_error"),
            (await client.post(url, json={"prompt": "x"}), 400, "invalid_request_error"),
            (
                await client.post(url, json={"model": "llama", "p": "x" * 2000}),
                413,
                "request_too_large",
            ),
            (await client.post(url, json={"model": "qwen"}), 503, "no_ready_lane"),
            (await client.get(url), 405, "method_not_allowed"),
            (await client.get(f"{ep.url}/nowhere"), 404, "not_found"),
        ]
        for response, status, kind in cases:
            assert response.status_code == status, response.text
            assert error_of(response)["type"] == kind
        assert "qwen" in error_of(cases[5][0])["message"]
        assert lane.completions == 0
        health = await client.get(f"{ep.url}/health")
        assert health.status_code == 503
        assert health.json()["missing"] == ["qwen"]
        assert health.json()["ready_lanes"] == {"llama": 1, "qwen": 0}


async def test_bearer_token_is_required_when_configured(workers: int) -> None:
    lane = FakeLane("a")
    async with (
        running_endpoint([lane], api_key="s3cret", workers=workers) as ep,
        http_client() as client,
    ):
        url = f"{ep.url}/v1/completions"
        missing = await client.post(url, json={"model": "m"})
        wrong = await client.post(url, json={"model": "m"}, headers={"authorization": "Bearer x"})
        models = await client.get(f"{ep.url}/v1/models")
        for response in (missing, wrong, models):
            assert response.status_code == 401
            assert error_of(response)["type"] == "unauthorized"
            assert "s3cret" not in response.text
        good = await client.post(
            url, json={"model": "m"}, headers={"authorization": "Bearer s3cret"}
        )
        assert good.status_code == 200
        assert (await client.get(f"{ep.url}/health")).status_code == 200
        assert lane.completions == 1


async def test_hostile_clients_do_not_hurt_the_endpoint(workers: int) -> None:
    lane = FakeLane("a")
    async with (
        running_endpoint([lane], max_body_bytes=1 << 20, workers=workers) as ep,
        http_client() as client,
    ):
        garbage = await raw_exchange(ep.url, b"GARBAGE\r\n\r\n")
        assert garbage.startswith(b"HTTP/1.1 400 ")
        huge = await raw_exchange(
            ep.url,
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n{",
        )
        assert huge.startswith(b"HTTP/1.1 413 ")
        assert b'"request_too_large"' in huge
        chunked = (
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            + b"100000\r\n"
            + b"x" * 0x100000
            + b"\r\n"
            + b"10\r\n"
            + b"x" * 16
            + b"\r\n0\r\n\r\n"
        )
        assert (await raw_exchange(ep.url, chunked)).startswith(b"HTTP/1.1 413 ")
        long_header = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200_000 + b"\r\n\r\n"
        assert (await raw_exchange(ep.url, long_header)).startswith(b"HTTP/1.1 431 ")
        bad_json = b'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n{"a":'
        assert (await raw_exchange(ep.url, bad_json + b"GARBAGE")).startswith(b"HTTP/1.1 400 ")
        # all along, others are served
        assert (
            await client.post(f"{ep.url}/v1/completions", json={"model": "m"})
        ).status_code == 200


async def test_slowloris_is_cut_off_while_others_are_served(workers: int) -> None:
    lane = FakeLane("a")
    async with (
        running_endpoint([lane], client_header_timeout=0.5, workers=workers) as ep,
        http_client() as client,
    ):
        slow = await trio.open_tcp_stream("127.0.0.1", port_of(ep.url))
        async with slow:
            start = trio.current_time()
            for byte in b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-A":
                await slow.send_all(bytes([byte]))
                await trio.sleep(0.005)  # the attack's own pacing, not synchronisation
            for _ in range(3):  # served while the slow head is pending
                response = await client.post(f"{ep.url}/v1/completions", json={"model": "m"})
                assert response.status_code == 200
            received = b""
            with trio.fail_after(3):
                while chunk := await slow.receive_some(4096):
                    received += chunk
            assert received.startswith(b"HTTP/1.1 408 ")
            assert trio.current_time() - start < 2.0


BUG = """\
import ddsup.endpoint._routes as routes

_model_of = routes._model_of


def broken(body):
    if b'"boom"' in body:
        raise RuntimeError("boom")
    return _model_of(body)


routes._model_of = broken
"""


async def test_a_bug_answers_500_and_the_server_keeps_serving(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, workers: int
) -> None:
    """A request that hits a bug gets a typed 500 and the endpoint serves on.

    The bug is planted in this process and, through a ``sitecustomize`` module on
    ``PYTHONPATH`` that every new interpreter runs, in the endpoint's worker processes.
    """
    (tmp_path / "sitecustomize.py").write_text(BUG)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    namespace: dict[str, object] = {}
    exec(compile(BUG, "sitecustomize.py", "exec"), namespace)
    monkeypatch.setattr(_routes, "_model_of", namespace["broken"])
    lane = FakeLane("a")
    async with running_endpoint([lane], workers=workers) as ep, http_client() as client:
        url = f"{ep.url}/v1/completions"
        response = await client.post(url, json={"model": "boom"})
        assert response.status_code == 500
        assert error_of(response)["type"] == "internal_error"
        assert "boom" not in response.text
        assert "Traceback" not in response.text
        assert (await client.post(url, json={"model": "m"})).status_code == 200


async def test_stream_passes_chunk_by_chunk(workers: int) -> None:
    lane = FakeLane("a")
    lane.chunks, lane.gated = 4, True
    async with running_endpoint([lane], workers=workers) as ep, http_client() as client:
        body = {"model": "m", "stream": True}
        async with client.stream("POST", f"{ep.url}/v1/completions", json=body) as response:
            assert response.status_code == 200
            assert response.headers["content-type"] == "text/event-stream"
            events: list[bytes] = []
            with trio.fail_after(5):
                async for data in response.aiter_raw():
                    events.extend(e for e in data.split(b"\n\n") if e)
                    # the lane sends the next event only once we have the previous one
                    assert lane.events_sent == min(len(events), 4)
                    lane.release()
        assert [json.loads(e[6:])["i"] for e in events[:4]] == [0, 1, 2, 3]
        assert events[4] == b"data: [DONE]"


async def test_no_retry_once_the_stream_began(workers: int) -> None:
    dying, other = FakeLane("dying"), FakeLane("other")
    for lane in (dying, other):
        lane.chunks, lane.die_after = 5, 2
    other.die_after = None
    async with running_endpoint([dying, other], workers=workers) as ep, http_client() as client:
        ep.table.set_ready([dying.info])  # the first attempt must land on the dying lane
        ep.table.add(other.info)
        ep.table.ready("m")[1].begin()  # make "other" look busier
        await ep.synced()
        body = {"model": "m", "stream": True}
        received: list[bytes] = []
        with pytest.raises(httpx.RemoteProtocolError):
            await read_stream(client, f"{ep.url}/v1/completions", body, received)
        ep.table.ready("m")[1].end()
        assert b"".join(received).count(b"data: ") == 2
        assert other.completions == 0
        assert dying.completions == 1


async def test_client_hangup_mid_stream_cancels_the_lane_request(workers: int) -> None:
    lane = FakeLane("a")
    lane.chunks, lane.gated = 10, True
    # a long lane timeout: only noticing the hang-up can end the request in time
    async with running_endpoint([lane], workers=workers, upstream_timeout=60.0) as ep:
        body = b'{"model":"m","stream":true}'
        head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)
        stream = await trio.open_tcp_stream("127.0.0.1", port_of(ep.url))
        await stream.send_all(head + body)
        received = b""
        with trio.fail_after(5):
            while b"data: " not in received:
                received += await stream.receive_some(65536)
        await stream.aclose()  # one event, then hang up
        with trio.fail_after(5):
            await lane.disconnected.wait()
        assert lane.events_sent == 1
        with trio.fail_after(5):
            # endpoint-internal bookkeeping has no event to await: bounded poll
            while ep.table.ready("m")[0].outstanding:  # noqa: ASYNC110
                await trio.sleep(0.005)


async def test_client_hangup_while_waiting_cancels_the_lane_request(workers: int) -> None:
    lane = FakeLane("a")
    lane.hold = trio.Event()
    async with running_endpoint([lane], workers=workers, upstream_timeout=60.0) as ep:
        request = (
            b'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 13\r\n\r\n{"model":"m"}'
        )
        stream = await trio.open_tcp_stream("127.0.0.1", port_of(ep.url))
        await stream.send_all(request)
        await lane.wait_for(lambda: lane.completions == 1)
        await stream.aclose()
        with trio.fail_after(5):
            await lane.disconnected.wait()


async def test_process_cap_answers_429(workers: int) -> None:
    lane = FakeLane("a")
    lane.hold = trio.Event()
    async with (
        running_endpoint([lane], max_concurrent=1, workers=workers) as ep,
        http_client() as client,
    ):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                partial(client.post, f"{ep.url}/v1/completions", json={"model": "m"})
            )
            await lane.wait_for(lambda: lane.completions == 1)
            response = await client.post(f"{ep.url}/v1/completions", json={"model": "m"})
            assert response.status_code == 429
            assert error_of(response)["type"] == "overloaded"
            assert response.headers["retry-after"] == "1"
            lane.hold.set()
        assert lane.completions == 1


async def test_hop_by_hop_headers_are_stripped_both_ways(workers: int) -> None:
    lane = FakeLane("a")
    lane.headers = [
        (b"keep-alive", b"timeout=1"),
        (b"x-lane", b"yes"),
        (b"proxy-authenticate", b"Basic"),
        (b"connection", b"x-private"),
        (b"x-private", b"1"),
    ]
    async with running_endpoint([lane], workers=workers) as ep, http_client() as client:
        headers = {
            "connection": "keep-alive, x-drop",
            "x-drop": "1",
            "keep-alive": "timeout=5",
            "te": "trailers",
            "proxy-authorization": "Basic eA==",
            "x-keep": "1",
        }
        response = await client.post(
            f"{ep.url}/v1/completions", json={"model": "m"}, headers=headers
        )
        assert response.status_code == 200
        sent = lane.received[0].headers
        assert sent["x-keep"] == "1"
        assert sent["host"] == f"127.0.0.1:{lane.port}"
        for name in ("x-drop", "keep-alive", "te", "proxy-authorization"):
            assert name not in sent
        assert response.headers["x-lane"] == "yes"
        for name in ("keep-alive", "proxy-authenticate", "x-private"):
            assert name not in response.headers


async def test_metrics_are_prometheus_text(workers: int) -> None:
    lane = FakeLane("a")
    async with running_endpoint([lane], workers=workers) as ep, http_client() as client:
        await client.post(f"{ep.url}/v1/completions", json={"model": "m"})
        await client.post(f"{ep.url}/v1/completions", json={"model": "zzz"})
        text = (await client.get(f"{ep.url}/metrics")).text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    requests = {
        (s.labels["model"], s.labels["status"]): s.value
        for s in families["ddsup_endpoint_requests"].samples
    }
    assert requests == {("m", "200"): 1.0, ("(unknown)", "404"): 1.0}
    assert "ddsup_endpoint_request_duration_seconds" in families
    assert "ddsup_endpoint_lane_outstanding" in families


async def test_get_answers_keep_the_connection_open(workers: int) -> None:
    lane = FakeLane("a")
    async with running_endpoint([lane], workers=workers) as ep:
        stream = await trio.open_tcp_stream("127.0.0.1", port_of(ep.url))
        async with stream:
            received = b""
            with trio.fail_after(5):
                for path in (b"/health", b"/v1/models", b"/metrics"):
                    await stream.send_all(b"GET " + path + b" HTTP/1.1\r\nhost: x\r\n\r\n")
                    while received.count(b"HTTP/1.1 200") < 1:
                        received += await stream.receive_some(65536)
                    head = received.split(b"\r\n\r\n", 1)[0].lower()
                    assert b"connection: close" not in head, path
                    received = b""
