"""Requests to switch protocols: an HTTP answer every time, and a log that stays small.

The endpoint never switches protocols. ``curl --http2`` offers h2c: the offer is ignored
and the request answered in HTTP/1.1. A WebSocket handshake is refused with 400 and
CONNECT with 405, each closing the connection; none of them logs a traceback, and a
flood of them writes a line or two to the endpoint's log, not one per request.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from endpoint_fakes import FakeLane, running_endpoint
from test_endpoint_fast_path import Conversation

BODY = b'{"model":"m","prompt":"x"}'
# What curl 8 sends for `curl --http2 http://…` with a JSON body (the h2c offer).
H2C = (
    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nUser-Agent: curl/8.5.0\r\nAccept: */*\r\n"
    b"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
    b"HTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\ncontent-type: application/json\r\n"
    b"Content-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
)
WEBSOCKET = (
    b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
    b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
)
CONNECT = b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"
PLAIN = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"


async def ask(url: str, data: bytes) -> tuple[bytes, dict[bytes, bytes], bytes, Conversation]:
    """Send ``data`` on a new connection: the answer, and the conversation (still open)."""
    talk = await Conversation.open(url)
    await talk.stream.send_all(data)
    status, headers, body = await talk.response()
    return status, headers, body, talk


async def test_an_h2c_offer_is_answered_in_http11(workers: int) -> None:
    """The offer is ignored: the request is served, on a connection that stays usable."""
    lane = FakeLane("a")
    async with running_endpoint([lane], workers=workers) as ep:
        status, headers, body, talk = await ask(ep.url, H2C)
        async with talk.stream:
            assert status.startswith(b"HTTP/1.1 200 "), body
            assert json.loads(body) == {"lane": "a", "n": 1}
            assert b"upgrade" not in headers
            offer = PLAIN[:-2] + b"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n\r\n"
            await talk.stream.send_all(offer + PLAIN)  # a GET's offer, then one more request
            for _ in range(2):
                status, headers, body = await talk.response()
                assert status.startswith(b"HTTP/1.1 200 "), body
                assert b"connection" not in headers
    received = lane.received[0]
    assert received.body == BODY
    assert not {"upgrade", "http2-settings"} & set(received.headers), received.headers


@pytest.mark.parametrize(
    ("request_bytes", "status", "kind"),
    [
        (WEBSOCKET, b"400", "invalid_request_error"),
        (WEBSOCKET.replace(b"/v1/models", b"/v1/realtime"), b"400", "invalid_request_error"),
        (CONNECT, b"405", "method_not_allowed"),
    ],
    ids=["websocket", "websocket-realtime", "connect"],
)
async def test_websocket_and_connect_are_refused_then_closed(
    request_bytes: bytes, status: bytes, kind: str, workers: int
) -> None:
    """Refused before the key is asked for (it says nothing about the endpoint's routes)."""
    lane = FakeLane("a")
    async with running_endpoint([lane], api_key="k3y", workers=workers) as ep:
        answer, headers, body, talk = await ask(ep.url, request_bytes)
        async with talk.stream:
            assert answer.startswith(b"HTTP/1.1 " + status + b" "), body
            assert json.loads(body)["error"]["type"] == kind
            assert headers[b"connection"] == b"close"
            assert await talk.closed()
        if status == b"405":
            assert headers[b"allow"] == b"get, head, post"  # (Conversation lowers heads)
    assert lane.received == []


async def test_a_flood_of_upgrades_is_answered_and_barely_logged(tmp_path: Path) -> None:
    """2,000 such requests to ``ddsup endpoint`` (a process, its stderr a file as under
    ``ddsup start``): every one answered, no traceback, a few lines of log."""
    lane = FakeLane("a")
    log = tmp_path / "endpoint.log"
    async with trio.open_nursery() as nursery:
        await nursery.start(lane.serve)
        argv = [sys.executable, "-m", "ddsup", "endpoint", "--bind", "127.0.0.1", "--port", "0"]
        argv += ["--lane", f"m=http://127.0.0.1:{lane.port}"]
        with log.open("wb") as stderr:
            proc = await trio.lowlevel.open_process(argv, stdout=subprocess.PIPE, stderr=stderr)
        try:
            url = await _listening(proc)
            statuses = await _flood(url, [H2C, WEBSOCKET, CONNECT], 2000)
            assert statuses == {b"200": 667, b"400": 667, b"405": 666}
        finally:
            proc.terminate()
            with trio.fail_after(10):
                await proc.wait()
            assert proc.stdout is not None
            await proc.stdout.aclose()
        nursery.cancel_scope.cancel()
    text = log.read_text()
    assert "Traceback" not in text and "bug " not in text, text[:2000]
    assert len(text) < 4096, text


async def _listening(proc: trio.Process) -> str:
    assert proc.stdout is not None
    line = b""
    with trio.fail_after(30):
        while not line.endswith(b"\n"):
            chunk = await proc.stdout.receive_some(1)
            assert chunk, "the endpoint exited before printing its URL"
            line += chunk
    return line.split()[-1].decode()


async def _flood(url: str, kinds: list[bytes], count: int) -> dict[bytes, int]:
    """Send ``count`` requests, each on its own connection, the kinds in turn (8 at once)."""
    statuses: dict[bytes, int] = {}
    todo = iter(range(count))

    async def sender() -> None:
        for n in todo:
            status, _, _, talk = await ask(url, kinds[n % len(kinds)])
            await talk.stream.aclose()
            code = status.split()[1]
            statuses[code] = statuses.get(code, 0) + 1

    async with trio.open_nursery() as nursery:
        for _ in range(8):
            nursery.start_soon(sender)
    return statuses
