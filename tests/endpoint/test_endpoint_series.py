"""The endpoint's time series for Content-Length and chunked requests, and across workers.

What ``ddsup report`` reads must count what went through the endpoint, whichever path
served a request and however many workers shared the port: every attempt once, body
bytes as the client got them decoded (not the chunk framing an HTTP/1.1 client gets
verbatim), and one file per worker that the reader combines.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from endpoint_fakes import FakeLane, http_client, running_endpoint

from ddsup.record import read_series
from ddsup.record._series import BYTES, FAILED, FINISHED, STARTED

CHUNKED_POST = (
    b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
    b'd\r\n{"model":"s"}\r\n0\r\n\r\n'
)


async def raw_request(url: str, data: bytes) -> bytes:
    """Send one request on its own connection (``connection: close`` framing ends it)."""
    stream = await trio.open_tcp_stream("127.0.0.1", int(url.rsplit(":", 1)[1]))
    async with stream:
        await stream.send_all(data)
        received = b""
        with trio.fail_after(10):
            while chunk := await stream.receive_some(65536):
                received += chunk
                if received.endswith(b"0\r\n\r\n"):
                    break
    return received


def dechunk(raw: bytes) -> bytes:
    """The body of one chunked response as bytes."""
    body, rest = b"", raw.split(b"\r\n\r\n", 1)[1]
    while True:
        size_line, rest = rest.split(b"\r\n", 1)
        size = int(size_line, 16)
        if not size:
            return body
        body, rest = body + rest[:size], rest[size + 2 :]


async def test_the_series_counts_what_either_path_relayed(
    workers: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DDSUP_STATE_DIR", str(tmp_path))  # the workers inherit it
    plain, streaming = FakeLane("plain", "p"), FakeLane("sse", "s")
    streaming.chunks = 6
    bodies: list[bytes] = []
    async with (
        running_endpoint([plain, streaming], workers=workers) as ep,
        http_client() as client,
    ):
        url = f"{ep.url}/v1/completions"
        for _ in range(3):  # content-length bodies, each on its own connection
            async with http_client() as one:
                bodies.append((await one.post(url, json={"model": "p"})).content)
                stream_body = {"model": "s", "stream": True}
                bodies.append((await one.post(url, json=stream_body)).content)
        chunked = await raw_request(ep.url, CHUNKED_POST)
        bodies.append(dechunk(chunked))
        assert (await client.post(url, json={"model": "nope"})).status_code == 404
    series = read_series(tmp_path)
    assert series.files == workers and series.problems == ()
    total = [sum(line.total(i) for line in series.lines) for i in range(6)]
    assert total[STARTED] == total[FINISHED] == 7 and total[FAILED] == 0
    assert total[BYTES] == sum(len(body) for body in bodies)  # decoded bytes, framing excluded
    refused = [line.refused for line in series.lines if line.refused]
    assert refused == [{"(unknown)": {"404": 1}}]
    by_lane = series.by_lane
    assert set(by_lane) == {"plain", "sse"}
    assert sum(by_lane["sse"].started) == 4
