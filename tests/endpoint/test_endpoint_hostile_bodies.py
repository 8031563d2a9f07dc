"""Hostile request bodies and heads: what a body costs, when it is refused, one answer.

A body is charged with the bytes that arrived, never with what its head declares: 16
connections that declare 32 MiB each and send one byte hold 16 bytes, not the whole
budget of a worker (512 MiB), and every other client is served meanwhile. A body over
``max_body_bytes`` is refused with 413 once it passes the limit, and at once when its
first chunk declares more. A request is answered the same whatever its body's framing.
"""

from __future__ import annotations

import json
import re

import pytest
import trio
from endpoint_fakes import FakeLane, Running, http_client, running_endpoint
from test_endpoint_fast_path import Conversation

MIB = 1024 * 1024
BODY = b'{"model":"m","prompt":"%s"}'


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


async def body_bytes(ep: Running) -> int:
    """What the endpoint says it holds of request bodies (its ``/metrics`` gauge)."""
    async with http_client() as client:
        text = (await client.get(f"{ep.url}/metrics")).text
    found = re.search(r"^ddsup_endpoint_request_body_bytes (\d+)$", text, re.M)
    assert found is not None, text
    return int(found[1])


async def until_held(ep: Running, count: int) -> None:
    """Wait until the endpoint holds at least ``count`` bytes of bodies.

    A bounded poll: the endpoint's reading of another connection has no event to await.
    """
    with trio.fail_after(10):
        while await body_bytes(ep) < count:  # noqa: ASYNC110
            await trio.sleep(0.02)


async def open_from(ep: Running, data: bytes, address: str = "127.0.0.1") -> trio.SocketStream:
    """A connection from ``address`` (any 127/8 address is this host) that sent ``data``."""
    stream = await trio.open_tcp_stream("127.0.0.1", port_of(ep.url), local_address=address)
    await stream.send_all(data)
    return stream


HEAD = b"POST /v1/completions HTTP/1.1\r\nhost: x\r\n"
CHUNKED_HEAD = HEAD + b"transfer-encoding: chunked\r\n\r\n"


def declared(framing: str, size: int) -> bytes:
    """A POST head that declares a body of ``size`` bytes (Content-Length, or one chunk)."""
    if framing == "content-length":
        return HEAD + b"content-length: %d\r\n\r\n" % size
    return CHUNKED_HEAD + b"%x\r\n" % size


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
async def test_bodies_that_declare_much_and_send_little_lock_no_one_out(framing: str) -> None:
    """The attack: 16 connections each declare 32 MiB (the default ``max_body_bytes``;
    16 × 32 MiB is a worker's whole default ``max_buffered_bytes``) and send one byte.
    A normal POST meanwhile gets its normal answer. One worker: the budget is a worker's."""
    lane = FakeLane("a")
    async with running_endpoint([lane], client_body_timeout=30.0, workers=1) as ep:
        holders = [await open_from(ep, declared(framing, 32 * MIB) + b"x") for _ in range(16)]
        await until_held(ep, 16)
        async with http_client() as client:
            response = await client.post(f"{ep.url}/v1/completions", json={"model": "m"})
        assert response.status_code == 200, response.text
        assert response.json() == {"lane": "a", "n": 1}
        assert await body_bytes(ep) == 16  # what arrived, not what was declared
        for holder in holders:
            await holder.aclose()


async def test_bodies_in_memory_are_bounded_by_what_arrived() -> None:
    """The bytes that did arrive are bounded by ``max_buffered_bytes``: a body whose next
    bytes do not fit is refused with 429 and ``Retry-After``, a small one is served. (The
    holder sends from another address than the client, whose share is then all its own.)"""
    lane = FakeLane("a")
    async with (
        running_endpoint(
            [lane], max_body_bytes=600, max_buffered_bytes=1000, client_body_timeout=30.0
        ) as ep,
        http_client() as client,
    ):
        holder = await open_from(ep, declared("content-length", 600) + b"x" * 500, "127.0.0.2")
        await until_held(ep, 500)
        big = {"model": "m", "prompt": "y" * 500}
        refused = await client.post(f"{ep.url}/v1/completions", json=big)
        assert refused.status_code == 429
        error = refused.json()["error"]
        assert error["type"] == "overloaded" and "1000 bytes of request bodies" in error["message"]
        assert refused.headers["retry-after"] == "1" and error["retry_after"] == 1
        small = await client.post(f"{ep.url}/v1/completions", json={"model": "m"})
        assert small.status_code == 200
        await holder.send_all(b"y" * 100)  # the holder's body is whole: it is served
        answer = Conversation(holder)
        status, _, _ = await answer.response()
        assert status.startswith(b"HTTP/1.1 400 ")  # x…xy…y is no JSON: the body was read
        await holder.aclose()
        assert (await client.post(f"{ep.url}/v1/completions", json=big)).status_code == 200


async def test_one_address_trickling_bodies_holds_only_its_share() -> None:
    """Bodies still arriving from one client address hold at most a quarter of the budget
    (at least one whole body): another address still gets its place."""
    lane = FakeLane("a")
    async with running_endpoint(
        [lane], max_body_bytes=600, max_buffered_bytes=4000, client_body_timeout=30.0
    ) as ep:  # one address's share: 1000 bytes
        head = declared("content-length", 600)
        holders = [await open_from(ep, head + b"x" * 500) for _ in range(2)]
        await until_held(ep, 1000)
        third = Conversation(await open_from(ep, head + b"x" * 100))
        status, headers, body = await third.response()
        assert status.startswith(b"HTTP/1.1 429 "), status
        assert headers[b"retry-after"] == b"1"
        assert b"still arriving from the client address 127.0.0.1" in body
        other = await open_from(ep, head[:-4] + b"\r\nconnection: close\r\n\r\n", "127.0.0.2")
        prompt = b'{"model":"m","prompt":"%s"}' % (b"z" * (600 - len(BODY % b"")))
        await other.send_all(prompt[:500])
        await until_held(ep, 1500)
        await other.send_all(prompt[500:])
        status, _, body = await Conversation(other).response()
        assert status.startswith(b"HTTP/1.1 200 "), body
        for stream in (*holders, third.stream, other):
            await stream.aclose()


async def test_a_chunked_body_over_the_limit_is_refused_without_reading_it(
    workers: int,
) -> None:
    """A first chunk that declares more than ``max_body_bytes`` is refused at its size
    line, as a Content-Length over the limit is (the endpoint waits for none of it); a
    body of small chunks is refused as soon as its bytes pass the limit."""
    lane = FakeLane("a")
    async with running_endpoint(
        [lane], max_body_bytes=MIB, client_body_timeout=30.0, workers=workers
    ) as ep:
        for head in (declared("chunked", 40_000_000), declared("content-length", 40_000_000)):
            talk = Conversation(await open_from(ep, head + b"x" * 1000))
            async with talk.stream:
                status, headers, body = await talk.response()  # within 10 s, not 30
                assert status.startswith(b"HTTP/1.1 413 "), status
                assert json.loads(body)["error"]["type"] == "request_too_large"
                assert headers[b"connection"] == b"close"
        chunk = b"%x\r\n%s\r\n" % (64 * 1024, b"x" * 64 * 1024)
        talk = Conversation(await open_from(ep, CHUNKED_HEAD))
        async with talk.stream:
            await talk.stream.send_all(chunk * 16 + b"1\r\nx\r\n")  # one byte over, then wait
            status, _, _ = await talk.response()
            assert status.startswith(b"HTTP/1.1 413 "), status
    assert lane.completions == 0


@pytest.mark.parametrize("hosts", [[], [b"host: a", b"host: b"]], ids=["without-host", "two-hosts"])
async def test_a_head_without_one_host_gets_one_answer_whatever_the_framing(
    hosts: list[bytes], workers: int
) -> None:
    """HTTP/1.1 requires exactly one Host header: 400, then the connection closes, for a
    Content-Length body and a chunked one alike."""
    lane = FakeLane("a")
    lines = b"".join(host + b"\r\n" for host in hosts)
    body = BODY % b"hello"
    framed = {
        "content-length": b"content-length: %d\r\n\r\n%s" % (len(body), body),
        "chunked": b"transfer-encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(body), body),
    }
    answers = {}
    async with running_endpoint([lane], workers=workers) as ep:
        for name, rest in framed.items():
            talk = Conversation(
                await open_from(ep, b"POST /v1/completions HTTP/1.1\r\n" + lines + rest)
            )
            async with talk.stream:
                status, headers, body = await talk.response()
                assert headers[b"connection"] == b"close"
                assert await talk.closed()
            answers[name] = (status, json.loads(body))
    assert answers["content-length"] == answers["chunked"], answers
    status, error = answers["chunked"]
    assert status.startswith(b"HTTP/1.1 400 ")
    assert error["error"]["type"] == "invalid_request_error" and "Host" in error["error"]["message"]
    assert lane.completions == 0
