"""One client connection, every request parsed by httptools: its shapes, its keep-alive.

Content-Length and chunked bodies, ``Expect: 100-continue``, bare-LF heads, HTTP/1.0
and pipelining all on one connection, each answered as HTTP says. Chunked answers reach
an HTTP/1.1 client as the lane framed them, and an HTTP/1.0 client decoded.
"""

from __future__ import annotations

import json

import trio
from endpoint_fakes import FakeLane, http_client, running_endpoint


def post(body: bytes, *extra: bytes) -> bytes:
    head = b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n" % len(body)
    return head + b"".join(line + b"\r\n" for line in extra) + b"\r\n" + body


class Conversation:
    """One raw connection: send bytes, read whole responses (content-length or chunked)."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buf = b""

    @classmethod
    async def open(cls, url: str) -> Conversation:
        return cls(await trio.open_tcp_stream("127.0.0.1", int(url.rsplit(":", 1)[1])))

    async def response(self) -> tuple[bytes, dict[bytes, bytes], bytes]:
        """(status line, headers, raw body as framed on the wire)."""
        with trio.fail_after(10):
            head = await self._until(b"\r\n\r\n")
            status, *lines = head.split(b"\r\n")
            headers = dict(line.lower().split(b": ", 1) for line in lines)
            if status.startswith(b"HTTP/1.1 1"):
                return status, headers, b""  # an interim answer: the final one follows
            if b"content-length" in headers:
                return status, headers, await self._take(int(headers[b"content-length"]))
            raw = b""
            while True:
                size_line = await self._until(b"\r\n")
                raw += size_line + b"\r\n"
                size = int(size_line.split(b";")[0], 16)
                raw += await self._take(size + 2)
                if not size:
                    return status, headers, raw

    async def closed(self) -> bool:
        """Whether the endpoint closes the connection now (nothing more arrives)."""
        with trio.fail_after(10):
            return not self.buf and not await self.stream.receive_some(65536)

    async def _until(self, mark: bytes) -> bytes:
        while mark not in self.buf:
            await self._receive()
        found, self.buf = self.buf.split(mark, 1)
        return found

    async def _take(self, count: int) -> bytes:
        while len(self.buf) < count:
            await self._receive()
        taken, self.buf = self.buf[:count], self.buf[count:]
        return taken

    async def _receive(self) -> None:
        data = await self.stream.receive_some(65536)
        assert data, "the endpoint closed the connection"
        self.buf += data


async def test_pipelined_requests_are_answered_in_order(workers: int) -> None:
    lane = FakeLane("a")
    async with running_endpoint([lane], workers=workers) as ep:
        talk = await Conversation.open(ep.url)
        async with talk.stream:
            await talk.stream.send_all(b"".join(post(b'{"model":"m"}') for _ in range(3)))
            answers = [json.loads((await talk.response())[2])["n"] for _ in range(3)]
    assert answers == [1, 2, 3]


async def test_a_request_in_pieces_is_served(workers: int) -> None:
    lane = FakeLane("a")
    async with running_endpoint([lane], workers=workers) as ep:
        talk = await Conversation.open(ep.url)
        async with talk.stream:
            request = post(b'{"model":"m","prompt":"x"}')
            for piece in (request[:7], request[7:30], request[30:-5], request[-5:]):
                await talk.stream.send_all(piece)
                await trio.sleep(0.01)  # the client's own pacing: each piece is one read
            status, _, body = await talk.response()
    assert status.startswith(b"HTTP/1.1 200 ")
    assert lane.received[0].body == b'{"model":"m","prompt":"x"}'
    assert json.loads(body)["lane"] == "a"


async def test_requests_of_every_shape_are_served_on_the_same_connection(workers: int) -> None:
    lane = FakeLane("a")
    async with running_endpoint([lane], workers=workers) as ep:
        talk = await Conversation.open(ep.url)
        async with talk.stream:
            await talk.stream.send_all(post(b'{"model":"m"}'))
            assert (await talk.response())[0].startswith(b"HTTP/1.1 200 ")
            chunked = (
                b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
                b'5\r\n{"mod\r\n8\r\nel":"m"}\r\n0\r\n\r\n'
            )
            await talk.stream.send_all(chunked)
            assert (await talk.response())[0].startswith(b"HTTP/1.1 200 ")
            await talk.stream.send_all(post(b'{"model":"m"}', b"expect: 100-continue"))
            continue_status, _, _ = await talk.response()
            assert continue_status.startswith(b"HTTP/1.1 100 ")
            assert (await talk.response())[0].startswith(b"HTTP/1.1 200 ")
            await talk.stream.send_all(b"GET /health HTTP/1.1\nhost: x\n\n")  # bare LF
            assert (await talk.response())[0].startswith(b"HTTP/1.1 200 ")
    assert [r.body for r in lane.received] == [b'{"model":"m"}'] * 3


async def test_a_request_line_with_extra_spaces_is_refused(workers: int) -> None:
    """llhttp takes ``GET  /x HTTP/1.1``; RFC 9112 has one space between the parts, and
    a proxy in front may split such a line otherwise: 400, and the lane never sees it."""
    lane = FakeLane("a")
    async with running_endpoint([lane], workers=workers) as ep:
        for line in (b"POST  /v1/completions HTTP/1.1", b"POST /v1/completions  HTTP/1.1"):
            talk = await Conversation.open(ep.url)
            async with talk.stream:
                body = b'{"model":"m"}'
                await talk.stream.send_all(
                    line + b"\r\nhost: x\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
                )
                assert (await talk.response())[0].startswith(b"HTTP/1.1 400 ")
    assert lane.received == []


async def test_http10_and_connection_close_end_the_connection(workers: int) -> None:
    lane = FakeLane("a")
    async with running_endpoint([lane], workers=workers) as ep:
        for request in (
            b"GET /health HTTP/1.0\r\n\r\n",
            b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
            post(b'{"model":"m"}', b"connection: close"),
        ):
            talk = await Conversation.open(ep.url)
            async with talk.stream:
                await talk.stream.send_all(request)
                status, headers, _ = await talk.response()
                assert status.startswith(b"HTTP/1.1 200 "), request
                assert headers.get(b"connection") == b"close", request
                assert await talk.closed(), request


async def test_http10_keep_alive_is_kept_when_asked(workers: int) -> None:
    """An HTTP/1.0 client that asks for keep-alive gets it (and is told so), requests
    after requests on one connection; a chunked answer reaches it decoded, then the
    connection closes (HTTP/1.0 has no chunks: the end of the body is the close)."""
    lane = FakeLane("a")
    body = b'{"model":"m"}'
    ask = b"POST /v1/completions HTTP/1.0\r\nconnection: keep-alive\r\ncontent-length: %d\r\n"
    async with running_endpoint([lane], workers=workers) as ep:
        talk = await Conversation.open(ep.url)
        async with talk.stream:
            await talk.stream.send_all(b"GET /health HTTP/1.0\r\nconnection: keep-alive\r\n\r\n")
            status, headers, _ = await talk.response()
            assert status.startswith(b"HTTP/1.1 200 ")
            assert headers[b"connection"] == b"keep-alive"
            await talk.stream.send_all(ask % len(body) + b"\r\n" + body)
            status, headers, _ = await talk.response()
            assert status.startswith(b"HTTP/1.1 200 ")
            assert headers[b"connection"] == b"keep-alive"
            lane.chunks = 3  # the lane streams from here on
            stream = b'{"model":"m","stream":true}'
            await talk.stream.send_all(ask % len(stream) + b"\r\n" + stream)
            with trio.fail_after(10):
                head = await talk._until(b"\r\n\r\n")
                rest = talk.buf
                while data := await talk.stream.receive_some(65536):
                    rest += data
    assert b"transfer-encoding" not in head.lower() and b"connection: close" in head.lower()
    assert rest.count(b"data: ") == 4 and b"\r\n0\r\n" not in rest  # decoded, not chunked


async def test_a_request_after_a_chunked_body_is_read_from_the_same_bytes(workers: int) -> None:
    """The parser gets one request's bytes at a time: a request that arrives together
    with a chunked one before it (trailers and all) is answered in its turn."""
    lane = FakeLane("a")
    chunked = (
        b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
        b'4\r\n{"mo\r\n9;ext=1\r\ndel":"m"}\r\n0\r\nx-trailer: 1\r\n\r\n'
    )
    async with running_endpoint([lane], workers=workers) as ep:
        talk = await Conversation.open(ep.url)
        async with talk.stream:
            await talk.stream.send_all(chunked + post(b'{"model":"m","n":2}') + chunked)
            answers = [json.loads((await talk.response())[2])["n"] for _ in range(3)]
    assert answers == [1, 2, 3]
    assert [r.body for r in lane.received] == [
        b'{"model":"m"}',
        b'{"model":"m","n":2}',
        b'{"model":"m"}',
    ]


async def _raw_lane(
    chunks: list[bytes], *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
) -> None:
    """A lane that answers every request with a chunked body written exactly as ``chunks``."""

    async def answer(stream: trio.SocketStream) -> None:
        received = b""
        while b"\r\n\r\n" not in received:
            received += await stream.receive_some(65536)
        head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        await stream.send_all(head + b"transfer-encoding: chunked\r\n\r\n")
        for chunk in chunks:
            await stream.send_all(chunk)
        await stream.aclose()

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    async with trio.open_nursery() as nursery:
        await nursery.start(trio.serve_listeners, answer, listeners)
        task_status.started(listeners[0].socket.getsockname()[1])


async def test_chunked_answers_reach_an_http11_client_as_the_lane_framed_them(
    workers: int,
) -> None:
    chunks = [
        b"000A\r\ndata: 1\n\n\n\r\n",  # a size with leading zeros and capitals: kept
        b"a\r\ndata: 2\n\n\n\r\n6\r\ndata: \r\n4\r\n3\n\n\n\r\n",  # one event in two chunks
        b"5;ext=1\r\nhello\r\n",  # an extension: this size line is rewritten
        b"0\r\nx-trailer: 1\r\n\r\n",  # trailers: dropped
    ]
    relayed = b"".join(chunks[:2]) + b"5\r\nhello\r\n0\r\n\r\n"
    async with trio.open_nursery() as nursery:
        port = await nursery.start(_raw_lane, chunks)
        lane = FakeLane("raw")
        lane.port = port
        async with running_endpoint([], extra=[lane.info], workers=workers) as ep:
            talk = await Conversation.open(ep.url)
            async with talk.stream:
                await talk.stream.send_all(post(b'{"model":"m","stream":true}'))
                status, headers, body = await talk.response()
        nursery.cancel_scope.cancel()
    assert status.startswith(b"HTTP/1.1 200 ")
    assert headers[b"transfer-encoding"] == b"chunked"
    assert body == relayed


async def test_a_hang_up_is_seen_on_a_lane_connection_another_client_used(workers: int) -> None:
    """The lane connection's hang-up watch follows it from client to client."""
    lane = FakeLane("a")
    # only the hang-up watch, not the lane's timeout, may end the held requests in time
    async with running_endpoint([lane], workers=workers, upstream_timeout=60.0) as ep:
        first = await Conversation.open(ep.url)
        async with first.stream:
            await first.stream.send_all(post(b'{"model":"m"}'))
            assert (await first.response())[0].startswith(b"HTTP/1.1 200 ")
        # the first client is gone; the next one likely gets its socket's number, and
        # (one idle lane connection) the lane connection it used
        for expected in (2, 3):
            lane.hold = trio.Event()
            talk = await Conversation.open(ep.url)
            await talk.stream.send_all(post(b'{"model":"m"}'))
            await lane.wait_for(lambda: lane.completions == expected)  # noqa: B023
            lane.disconnected = trio.Event()
            await talk.stream.aclose()
            with trio.fail_after(5):
                await lane.disconnected.wait()


async def test_a_lane_silent_mid_stream_is_cut_off(workers: int) -> None:
    lane = FakeLane("a")
    lane.chunks, lane.gated = 3, True  # one event, then it waits for a release never given
    async with running_endpoint([lane], workers=workers, upstream_timeout=0.5) as ep:
        talk = await Conversation.open(ep.url)
        async with talk.stream:
            await talk.stream.send_all(post(b'{"model":"m","stream":true}'))
            start = trio.current_time()
            received = b""
            with trio.fail_after(5):
                while chunk := await talk.stream.receive_some(65536):
                    received += chunk
            assert b"data: " in received
            assert not received.endswith(b"0\r\n\r\n")  # cut short: no last chunk
            assert trio.current_time() - start < 3.0
        async with http_client() as client:  # counted as the lane's failure mid-response
            metrics = (await client.get(f"{ep.url}/metrics")).text
        assert 'ddsup_endpoint_upstream_errors_total{lane="a",kind="mid-response"} 1' in metrics


async def test_an_idle_keep_alive_connection_is_closed_silently(workers: int) -> None:
    lane = FakeLane("a")
    async with running_endpoint([lane], workers=workers, client_idle_timeout=0.3) as ep:
        talk = await Conversation.open(ep.url)
        async with talk.stream:
            await talk.stream.send_all(post(b'{"model":"m"}'))
            assert (await talk.response())[0].startswith(b"HTTP/1.1 200 ")
            start = trio.current_time()
            assert await talk.closed()  # no 408 for a connection that sent nothing
            assert trio.current_time() - start < 2.0
