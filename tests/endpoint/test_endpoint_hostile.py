"""Hostile and odd clients: each attack gets a clear answer and leaves the endpoint serving.

Every test here failed on the endpoint before the fix it names: HEAD dropped the
connection with a traceback (defect 4), a slow body held its request slot for as long as
its client trickled bytes (5), a deeply nested body got 500 (9); ``HTTP/9.9`` was
answered, a 100 KB head passed a 64 KiB limit, Content-Length with Transfer-Encoding kept
the connection open, and the client's key went on to the lane (the risks).
"""

from __future__ import annotations

import json
from functools import partial

import pytest
import trio
from endpoint_fakes import FakeLane, http_client, running_endpoint
from test_endpoint_fast_path import Conversation, post

from ddsup.endpoint import LaneInfo


async def exchange(url: str, data: bytes) -> tuple[bytes, bool]:
    """Send ``data`` on a new connection: (everything received, closed by the endpoint)."""
    stream = await trio.open_tcp_stream("127.0.0.1", int(url.rsplit(":", 1)[1]))
    async with stream:
        await stream.send_all(data)
        received = b""
        with trio.move_on_after(2):
            while chunk := await stream.receive_some(65536):
                received += chunk
            return received, True
    return received, False


def no_traceback(capfd: pytest.CaptureFixture[str]) -> None:
    """Nothing the endpoint (or its workers) wrote is a traceback or a logged bug."""
    err = capfd.readouterr().err
    assert "Traceback" not in err and "bug " not in err, err


async def test_head_is_answered_like_get_without_a_body(
    workers: int, capfd: pytest.CaptureFixture[str]
) -> None:
    lane = FakeLane("a")
    async with running_endpoint([lane], workers=workers) as ep:
        talk = await Conversation.open(ep.url)
        async with talk.stream:
            for path in (b"/health", b"/v1/models", b"/metrics"):
                await talk.stream.send_all(b"HEAD %s HTTP/1.1\r\nhost: x\r\n\r\n" % path)
                with trio.fail_after(5):
                    head = await talk._until(b"\r\n\r\n")
                assert head.startswith(b"HTTP/1.1 200 OK"), path
                assert b"content-length: " in head.lower()
            await talk.stream.send_all(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
            status, _, body = await talk.response()  # the same connection, no body in between
            assert status.startswith(b"HTTP/1.1 200 ") and json.loads(body)["status"] == "ok"
        for path, status in ((b"/nope", b"404"), (b"/v1/completions", b"405")):
            answer, _ = await exchange(ep.url, b"HEAD %s HTTP/1.1\r\nhost: x\r\n\r\n" % path)
            head, _, rest = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 " + status) and rest == b"", answer
            if status == b"405":
                assert b"\r\nallow: POST" in head
    no_traceback(capfd)


async def test_slow_bodies_are_cut_off_and_hold_no_request_slot(workers: int) -> None:
    """Clients trickling their bodies byte by byte: 408 within the body deadline in all,
    and meanwhile others are served, not refused with 429 (``max_concurrent`` is 2)."""
    lane = FakeLane("a")
    async with (
        running_endpoint([lane], max_concurrent=2, workers=workers) as ep,  # body deadline 0.5 s
        http_client() as client,
        trio.open_nursery() as nursery,
    ):
        answers: list[bytes] = []
        done, arrived = trio.open_memory_channel[None](3)

        async def trickle() -> None:
            stream = await trio.open_tcp_stream("127.0.0.1", int(ep.url.rsplit(":", 1)[1]))
            async with stream:
                await stream.send_all(post(b"x" * 100)[:-100])  # the head, then the body…
                received = b""
                with trio.fail_after(5):
                    for _ in range(100):  # … a byte every 50 ms: each read well in time
                        try:
                            await stream.send_all(b"x")
                        except trio.BrokenResourceError:
                            break
                        with trio.move_on_after(0.05):
                            received += await stream.receive_some(65536)
                        if received:
                            break
                answers.append(received)
                done.send_nowait(None)

        start = trio.current_time()
        for _ in range(3):
            nursery.start_soon(trickle)
        for _ in range(5):
            response = await client.post(f"{ep.url}/v1/completions", json={"model": "m"})
            assert response.status_code == 200
        with trio.fail_after(5):
            for _ in range(3):
                await arrived.receive()
    assert all(answer.startswith(b"HTTP/1.1 408 ") for answer in answers), answers
    assert trio.current_time() - start < 3.0  # the deadline is for the whole body
    assert lane.completions == 5


async def test_a_deeply_nested_body_is_a_clear_400(
    workers: int, capfd: pytest.CaptureFixture[str]
) -> None:
    lane = FakeLane("a")
    async with running_endpoint([lane], workers=workers) as ep, http_client() as client:
        url = f"{ep.url}/v1/completions"
        response = await client.post(url, content=b"[" * 100_000)
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error" and "nested" in error["message"]
        assert (await client.post(url, json={"model": "m"})).status_code == 200
    no_traceback(capfd)


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GET /health HTTP/9.9\r\nhost: x\r\n\r\n", b"505"),
        (b"GET /health HTTP/2.0\r\nhost: x\r\n\r\n", b"505"),
        (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", b"505"),
        (b"GET /health HTTP/9.9\nhost: x\n\n", b"505"),  # bare LF line ends
        (
            b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n"
            b"transfer-encoding: chunked\r\n\r\n0\r\n\r\n",
            b"400",
        ),
        (
            b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n"
            b"content-length: 5\r\n\r\n0\r\n\r\n",
            b"400",
        ),
        (
            b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 13\r\n"
            b'content-length: 13\r\n\r\n{"model":"m"}',
            b"400",
        ),
        (
            b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 13\r\n"
            b'x-folded: a\r\n b\r\n\r\n{"model":"m"}',
            b"400",
        ),
        (
            b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 13\r\n"
            b'x-a: a\rb\r\n\r\n{"model":"m"}',
            b"400",
        ),
        (
            b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: gzip, chunked\r\n"
            b'\r\nd\r\n{"model":"m"}\r\n0\r\n\r\n',
            b"501",
        ),
        (
            b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n"
            b'\r\nd\n{"model":"m"}\r\n0\r\n\r\n',
            b"400",
        ),
        (b"GET /health HTTP/1.1\r\nhost: x\r\nx-a: " + b"a" * 100_000 + b"\r\n\r\n", b"431"),
        (b"GET /health HTTP/1.1\nhost: x\nx-a: " + b"a" * 100_000 + b"\n\n", b"431"),
    ],
    ids=[
        "http-9.9",
        "http-2.0",
        "h2-preface",
        "http-9.9-lf",
        "cl-and-te",
        "te-and-cl",
        "two-cl",
        "obs-fold",
        "bare-cr",
        "te-gzip",
        "chunk-size-bare-lf",
        "100kb-head",
        "100kb-lf",
    ],
)
async def test_refused_requests_are_answered_then_closed(
    request_bytes: bytes, status: bytes, workers: int
) -> None:
    lane = FakeLane("a")
    async with running_endpoint([lane], workers=workers) as ep:
        answer, closed = await exchange(ep.url, request_bytes)
    assert answer.startswith(b"HTTP/1.1 " + status + b" "), answer[:200]
    assert b"\r\nconnection: close" in answer.split(b"\r\n\r\n")[0]
    assert closed
    assert lane.completions == 0


async def test_the_header_limit_is_the_configured_one(workers: int) -> None:
    lane = FakeLane("a")
    async with running_endpoint([lane], max_header_bytes=8192, workers=workers) as ep:
        fits = b"GET /health HTTP/1.1\r\nhost: x\r\nx-a: " + b"a" * 7000 + b"\r\n\r\n"
        over = b"GET /health HTTP/1.1\r\nhost: x\r\nx-a: " + b"a" * 9000 + b"\r\n\r\n"
        assert (await exchange(ep.url, fits))[0].startswith(b"HTTP/1.1 200 ")
        assert (await exchange(ep.url, over))[0].startswith(b"HTTP/1.1 431 ")


async def test_open_routes_are_configurable(workers: int) -> None:
    lane = FakeLane("a")
    async with (
        running_endpoint(
            [lane], api_key="k3y", open_routes=("/health", "/v1/models"), workers=workers
        ) as ep,
        http_client() as client,
    ):
        assert (await client.get(f"{ep.url}/health")).status_code == 200
        assert (await client.get(f"{ep.url}/v1/models")).status_code == 200
        closed = await client.get(f"{ep.url}/metrics")
        assert closed.status_code == 401
        assert closed.headers["www-authenticate"] == "Bearer"
        key = {"authorization": "Bearer k3y"}
        assert (await client.get(f"{ep.url}/metrics", headers=key)).status_code == 200


async def test_the_clients_key_is_not_forwarded_and_a_lanes_own_is_sent(workers: int) -> None:
    keyed, plain = FakeLane("keyed", "k"), FakeLane("plain", "p")
    async with (
        running_endpoint([], extra=(), api_key="client-key", workers=workers) as ep,
        trio.open_nursery() as nursery,
        http_client() as client,
    ):
        for lane in (keyed, plain):
            await nursery.start(lane.serve)
        ep.table.set_ready(
            [
                LaneInfo("keyed", "k", f"http://127.0.0.1:{keyed.port}", api_key="lane-key"),
                plain.info,
            ]
        )
        await ep.synced()
        headers = {"authorization": "Bearer client-key"}
        for model in ("k", "p"):
            post_ = partial(client.post, f"{ep.url}/v1/completions", headers=headers)
            assert (await post_(json={"model": model})).status_code == 200
        nursery.cancel_scope.cancel()
    assert keyed.received[0].headers["authorization"] == "Bearer lane-key"
    assert "authorization" not in plain.received[0].headers
    assert "lane-key" not in repr(LaneInfo("x", "k", "http://h:1", api_key="lane-key"))


@pytest.mark.parametrize("first_read", ["request and more", "the request alone"])
async def test_bytes_after_a_closing_request_do_not_reset_its_answer(
    workers: int, first_read: str
) -> None:
    """Found by the fuzz test: a client that sends more after ``Connection: close`` (which
    it must not) still reads its answer whole; closing on unread bytes would reset the
    connection, and the reset destroyed the answer in flight (RFC 9112 §9.6). The
    endpoint's first read takes 64 KiB: the bytes after the request are partly read with
    it, or (a request of exactly 64 KiB) all still in the kernel."""
    lane = FakeLane("a")

    def closing(pad: int) -> bytes:
        return post(b'{"model":"m","prompt":"%s"}' % (b"x" * pad), b"connection: close")

    pad = 0
    if first_read == "the request alone":
        while len(closing(pad)) != 65536:
            pad += 65536 - len(closing(pad))
    async with running_endpoint([lane], workers=workers) as ep:
        answer, closed = await exchange(ep.url, closing(pad) + b"[" * 100_000)
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:300]
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1]) == {"lane": "a", "n": 1}
    assert closed
