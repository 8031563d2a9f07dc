"""The lean HTTP/1.1 response parser the endpoint uses towards its lanes."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ddsup.endpoint._http1 import BodyDecoder, ProtocolError, ResponseHead, parse_head, split_head


def parsed(head: bytes) -> ResponseHead:
    """``head`` (status line and headers) with its blank line, parsed."""
    return parse_head(head + b"\r\n\r\n")


def decode(head: bytes, pieces: list[bytes]) -> tuple[bytes, BodyDecoder]:
    decoder = BodyDecoder(parsed(head))
    return b"".join(decoder.feed(p) for p in pieces), decoder


def chunked(body_parts: list[bytes]) -> bytes:
    framed = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(p), p) for p in body_parts if p)
    return framed + b"0\r\nx-trailer: 1\r\n\r\n"


def test_head_is_split_and_parsed() -> None:
    raw = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-A:  spaced \r\n\r\nbody"
    assert split_head(raw[:20]) is None
    split = split_head(raw)
    assert split is not None
    head_bytes, rest = split
    head = parse_head(head_bytes)
    assert (head.status, head.reason, rest) == (200, b"OK", b"body")
    assert head.headers == [(b"content-type", b"text/plain"), (b"x-a", b"spaced")]
    assert head.keep_alive()
    assert not parsed(b"HTTP/1.0 200 OK").keep_alive()
    assert not parsed(b"HTTP/1.1 200 OK\r\nConnection: close").keep_alive()


def test_the_version_decides_reuse_after_empty_lines_too() -> None:
    for empty in (b"", b"\r\n"):
        head = parse_head(empty + b"HTTP/1.0 200 OK\r\ncontent-length: 0\r\n\r\n")
        assert (head.status, head.http11, head.keep_alive()) == (200, False, False)
        assert parse_head(empty + b"HTTP/1.1 200 OK\r\n\r\n").keep_alive()


@pytest.mark.parametrize(
    "head",
    [
        b"HTTP/2 200 OK",
        b"HTTP/1.1 20 OK",
        b"garbage",
        b"HTTP/1.1 200 OK\r\nno colon",
        b"HTTP/1.1 200 OK\r\n folded: x",
        b"HTTP/1.1 200 O\x01K",
        b"HTTP/1.1 200 OK\r\nX: a\rb",
        b"HTTP/1.1 200 OK\r\nX: a\x00b",
        b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\ntransfer-encoding: chunked",
    ],
)
def test_bad_heads_are_protocol_errors(head: bytes) -> None:
    with pytest.raises(ProtocolError):
        parsed(head)


def test_content_length_framing() -> None:
    body, decoder = decode(b"HTTP/1.1 200 OK\r\ncontent-length: 5", [b"he", b"llo"])
    assert body == b"hello"
    assert decoder.done
    assert decoder.reusable
    _, short = decode(b"HTTP/1.1 200 OK\r\ncontent-length: 5", [b"he"])
    with pytest.raises(ProtocolError):
        short.eof()
    with pytest.raises(ProtocolError):
        BodyDecoder(parsed(b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2"))
    empty = BodyDecoder(parsed(b"HTTP/1.1 204 No Content"))
    assert empty.done


def test_until_close_framing_is_never_reused() -> None:
    body, decoder = decode(b"HTTP/1.1 200 OK", [b"abc", b"def"])
    assert body == b"abcdef"
    assert (decoder.done, decoder.reusable) == (False, False)
    decoder.eof()
    assert (decoder.done, decoder.reusable) == (True, False)


@given(
    parts=st.lists(st.binary(min_size=0, max_size=40), max_size=8),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=10),
)
def test_chunked_decodes_whatever_the_read_boundaries(parts: list[bytes], cuts: list[int]) -> None:
    framed = chunked(parts)
    bounds = sorted({min(c, len(framed)) for c in cuts} | {0, len(framed)})
    pieces = [framed[a:b] for a, b in itertools.pairwise(bounds)]
    body, decoder = decode(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked", pieces)
    assert body == b"".join(parts)
    assert decoder.payload == len(body)
    assert decoder.done
    assert decoder.reusable


@pytest.mark.parametrize("framed", [b"zz\r\n", b"-5\r\nhello\r\n", b"3\r\nabcdef\r\n0\r\n\r\n"])
def test_bad_chunk_framing_is_a_protocol_error(framed: bytes) -> None:
    decoder = BodyDecoder(parsed(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked"))
    with pytest.raises(ProtocolError):
        decoder.feed(framed)


def test_truncated_chunked_body_is_detected_at_eof() -> None:
    body, decoder = decode(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked", [b"5\r\nhel"])
    assert body == b"hel"
    with pytest.raises(ProtocolError):
        decoder.eof()


CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked"


def canonical(body_parts: list[bytes]) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in body_parts if p) + b"0\r\n\r\n"


@given(
    parts=st.lists(st.binary(min_size=0, max_size=40), max_size=8),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=10),
    extensions=st.booleans(),
)
def test_scan_relays_canonical_chunks_as_they_came(
    parts: list[bytes], cuts: list[int], extensions: bool
) -> None:
    """What an HTTP/1.1 client gets is the lane's bytes; odd framing lines are rewritten."""
    framed = chunked(parts) if extensions else canonical(parts)
    bounds = sorted({min(c, len(framed)) for c in cuts} | {0, len(framed)})
    decoder = BodyDecoder(parsed(CHUNKED_HEAD))
    relayed = b"".join(decoder.scan(framed[a:b]) for a, b in itertools.pairwise(bounds))
    assert decoder.done
    assert decoder.reusable
    assert relayed == canonical(parts)  # extensions and trailers dropped, the rest verbatim
    assert decoder.payload == len(b"".join(parts))  # body bytes, framing not counted
    if not extensions:
        assert relayed == framed


@pytest.mark.parametrize("head", [b"HTTP/1.1 200 OK\r\ncontent-length: 13", b"HTTP/1.1 200 OK"])
def test_scan_relays_a_body_not_chunked_as_it_came_over_many_reads(head: bytes) -> None:
    """Reads of a Content-Length or until-close body that look like chunk framing are
    body bytes all the same."""
    decoder = BodyDecoder(parsed(head))
    reads = [b"ab", b"2\r\nhi\r\n", b"zz\r\n"]
    assert [decoder.scan(read) for read in reads] == reads
    assert decoder.payload == 13


def test_scan_passes_a_clean_read_without_copying_it() -> None:
    decoder = BodyDecoder(parsed(CHUNKED_HEAD))
    read = b"5\r\nhello\r\n"
    assert decoder.scan(read) is read
    assert decoder.scan(b"0\r\n\r\n") == b"0\r\n\r\n"
    assert decoder.done


def test_scan_cuts_what_follows_the_body() -> None:
    decoder = BodyDecoder(parsed(CHUNKED_HEAD))
    assert decoder.scan(b"2\r\nhi\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n") == b"2\r\nhi\r\n0\r\n\r\n"
    assert decoder.done
    assert not decoder.reusable


@given(
    reads=st.lists(
        st.tuples(
            st.binary(max_size=40),
            st.integers(min_value=-2, max_value=2),  # how far the size line is off
            st.sampled_from([b"%x", b"%X", b"0%x", b"%x;e=1", b" %x"]),
            st.sampled_from([b"\r\n", b"\n", b"x\r\n", b"", b"\n\n"]),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_scan_takes_a_read_at_once_as_it_would_in_two_pieces(
    reads: list[tuple[bytes, int, bytes, bytes]],
) -> None:
    """A stream's reads, one event each as a lane sends them, some with a size line that
    is off or written oddly, or a chunk end that is not CRLF: taken at once, each gives
    the client, the counts and the errors that its bytes give when they come in two."""
    whole = BodyDecoder(parsed(CHUNKED_HEAD))
    split = BodyDecoder(parsed(CHUNKED_HEAD))
    for data, off, size_form, end in reads:
        read = size_form % max(0, len(data) + off) + b"\r\n" + data + end
        try:
            relayed: bytes | type[ProtocolError] = whole.scan(read)
        except ProtocolError:
            relayed = ProtocolError
        try:
            expected: bytes | type[ProtocolError] = split.scan(read[:1]) + split.scan(read[1:])
        except ProtocolError:
            expected = ProtocolError
        assert relayed == expected
        if expected is ProtocolError:
            return
        assert (whole.payload, whole.done, whole.reusable) == (
            split.payload,
            split.done,
            split.reusable,
        )
