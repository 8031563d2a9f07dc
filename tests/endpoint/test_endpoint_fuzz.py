"""Property-based fuzz of the endpoint's HTTP surface with the inputs of a hostile client.

Each example is one connection to a real endpoint (in-process, over TCP) with a request
assembled from hostile parts: methods (HEAD, PUT, …), HTTP versions (``HTTP/9.9``),
every route, Content-Length that lies, Content-Length with Transfer-Encoding, heads over
the 64 KiB limit, bodies nested 100,000 deep, junk bodies, multipart forms, and bodies cut
short by the client. Whatever arrives, the endpoint must answer with a well-formed status
line that is never a 500 (or close without a word, only for a body cut short), must not
log a traceback, and must go on serving: a plain request after each example gets its 200.
"""

from __future__ import annotations

import json
import re

import pytest
from endpoint_fakes import FakeLane, running_endpoint
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_endpoint_hostile import exchange

from ddsup.endpoint._route_table import ROUTES

STATUS_LINE = re.compile(rb"HTTP/1\.1 ([1-5][0-9][0-9]) [^\r\n]*\r\n")

bodies = st.one_of(
    st.just(b""),
    st.builds(
        lambda m: json.dumps({"model": m, "prompt": "hi"}).encode(), st.sampled_from(["m", "x"])
    ),
    st.builds(lambda n: b"[" * n + b"]" * n, st.sampled_from([10, 999, 5000, 100_000])),
    st.builds(lambda n: b'{"model":' * n + b"1" + b"}" * n, st.sampled_from([2, 2000])),
    st.binary(max_size=300),
    st.just(b'--b\r\ncontent-disposition: form-data; name="model"\r\n\r\nm\r\n--b--\r\n'),
)


@st.composite
def hostile_requests(draw: st.DrawFn) -> tuple[bytes, bool]:
    """(the bytes to send, whether the body is cut short by the client)."""
    method = draw(st.sampled_from([b"GET", b"POST", b"HEAD", b"PUT", b"OPTIONS", b"DELETE"]))
    path = draw(st.sampled_from([*sorted(ROUTES), b"/nope", b"/v1/completions?x=1", b"*"]))
    version = draw(
        st.sampled_from([b"HTTP/1.1", b"HTTP/1.1", b"HTTP/1.0", b"HTTP/9.9", b"HTTP/2.0"])
    )
    body = draw(bodies)
    headers = [b"host: 127.0.0.1", b"connection: close"]  # each example ends its connection
    if draw(st.booleans()):
        headers.append(b"authorization: Bearer client-key")
    if draw(st.booleans()):
        headers.append(b"content-type: multipart/form-data; boundary=b")
    framing = draw(st.sampled_from(["length", "short", "te", "cl+te", "none"]))
    cut = False
    if framing == "length":
        headers.append(b"content-length: %d" % len(body))
    elif framing == "short":  # claims more than it sends, then stops sending
        headers.append(b"content-length: %d" % (len(body) + 10))
        cut = True
    elif framing == "te":
        headers.append(b"transfer-encoding: chunked")
        body = (b"%x\r\n%s\r\n" % (len(body), body) if body else b"") + b"0\r\n\r\n"
    elif framing == "cl+te":
        headers += [b"content-length: %d" % len(body), b"transfer-encoding: chunked"]
    if draw(st.booleans()):
        headers.append(b"x-filler: " + b"a" * draw(st.sampled_from([10, 60_000, 70_000, 100_000])))
    head = b"%s %s %s\r\n%s\r\n\r\n" % (method, path, version, b"\r\n".join(headers))
    return head + body, cut


@pytest.mark.slow
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(example=hostile_requests())
async def test_no_input_gets_a_500_a_traceback_or_a_stuck_endpoint(
    example: tuple[bytes, bool], capfd: pytest.CaptureFixture[str]
) -> None:
    data, cut = example
    lane = FakeLane("a")
    async with running_endpoint(
        [lane], max_body_bytes=64 * 1024, max_buffered_bytes=128 * 1024
    ) as ep:
        answer, closed = await exchange(ep.url, data)
        if answer or not cut:
            match = STATUS_LINE.match(answer)
            assert match is not None, answer[:300]
            assert match.group(1) != b"500", answer[:300]
        ok, _ = await exchange(
            ep.url, b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
        )
        assert ok.startswith(b"HTTP/1.1 200 "), ok[:300]
        assert not any("client-key" in r.headers.get("authorization", "") for r in lane.received)
    err = capfd.readouterr().err
    assert "Traceback" not in err and "bug " not in err, err
    assert closed  # connection: close (or an error) ends every example's connection
