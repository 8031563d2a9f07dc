"""The endpoint's side of the lane connections: response heads and body framing.

As the *client* of the lanes, a general HTTP library (h11) would be a large share of a proxied request's CPU,
mostly in checks that matter for arbitrary peers; the endpoint writes every request itself and
talks only to its own lanes. A response head is parsed by httptools (llhttp, in C; faster than
a regular-expression parser) with
its strict defaults: header names are tokens, field values hold no control bytes and no
lone CR, line ends are CRLF, no Content-Length next to Transfer-Encoding. The reason
phrase, which llhttp does not check, is checked here. So a head that passes can be
written to the client as it is. The body framing (Content-Length, chunked, or until
close) is followed here, so that body bytes can be passed on without a copy.

Pure code over bytes, no I/O: :class:`ResponseHead` from :func:`parse_head`, and a
:class:`BodyDecoder` fed with received bytes. It hands back either the decoded body
(:meth:`BodyDecoder.feed`, for an HTTP/1.0 client) or the bytes to relay as
they are (:meth:`BodyDecoder.scan`, for an HTTP/1.1 client: chunks pass through untouched,
only a non-canonical chunk-size line is rewritten and trailers are dropped).
"""

from __future__ import annotations

import re
import time
from datetime import timezone
from email.utils import parsedate_to_datetime

import httptools

from ddsup.endpoint._connection import CHUNKED, CLOSE, LENGTH, Framing

MAX_HEAD = 64 * 1024
MAX_RETRY_AFTER = 86400.0  # seconds: a lane's Retry-After beyond a day is taken as a day
_HEAD_END = re.compile(rb"\r?\n\r?\n")
_REASON = re.compile(rb"[\t\x20-\x7e\x80-\xff]*")
_HEX = re.compile(rb"[0-9a-fA-F]{1,16}")
_CANONICAL_SIZE = re.compile(rb"[0-9a-fA-F]{1,16}\r")
_WHOLE_CHUNK = re.compile(rb"([0-9a-fA-F]{1,16})\r\n")


class ProtocolError(Exception):
    """The lane's response is not valid HTTP/1.1 (or was cut short)."""


# Hop-by-hop response headers (RFC 9110 §7.6.1) besides Transfer-Encoding: a head with
# one of them (or a proxy-* one) is rewritten for the client, never passed as it came.
HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"te", b"trailer", b"upgrade"})


class ResponseHead:
    """Status line and headers (names lower-case) of one response, and what framing needs.

    A slotted class rather than a frozen dataclass: one is built per proxied request.
    ``lengths`` holds the Content-Length values, ``codings`` the Transfer-Encoding ones,
    ``raw`` the head as received and ``end_to_end`` whether it holds only end-to-end
    headers (and at most ``transfer-encoding: chunked``), so that it may pass as it came.
    """

    __slots__ = (
        "close",
        "codings",
        "end_to_end",
        "headers",
        "http11",
        "lengths",
        "raw",
        "reason",
        "status",
    )
    # The callbacks it has none for, found None rather than missing: httptools asks for
    # each when it makes a parser (one per response), and a missing one costs a failed
    # look-up.
    on_message_begin = on_headers_complete = on_body = None
    on_chunk_header = on_chunk_complete = on_message_complete = None

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self.status = 0
        self.reason = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.http11 = True
        self.close = False  # the lane said Connection: close
        self.end_to_end = True
        self.lengths: list[bytes] = []
        self.codings: list[bytes] = []

    def on_status(self, reason: bytes) -> None:
        self.reason += reason

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if value[-1:] in (b" ", b"\t"):
            value = value.rstrip(b" \t")  # llhttp strips the leading OWS only
            self.end_to_end = False
        if name == b"content-length":
            self.lengths.append(value)
        elif name == b"transfer-encoding":
            self.codings.append(value)
            self.end_to_end = self.end_to_end and value.lower() == b"chunked"
        elif name in HOP_BY_HOP or name.startswith(b"proxy-"):
            self.end_to_end = False
            if name == b"connection" and b"close" in value.lower():
                self.close = True
        self.headers.append((name, value))

    def keep_alive(self) -> bool:
        return self.http11 and not self.close


def split_head(buffer: bytes) -> tuple[bytes, bytes] | None:
    """(head, rest) once ``buffer`` holds a complete head, else ``None``."""
    end = buffer.find(b"\r\n\r\n")
    if end >= 0:
        return buffer[: end + 4], buffer[end + 4 :]
    match = _HEAD_END.search(buffer)  # bare LF line ends: parse_head says what is wrong
    if match is None:
        if len(buffer) > MAX_HEAD:
            raise ProtocolError(f"response head over {MAX_HEAD} bytes")
        return None
    return buffer[: match.end()], buffer[match.end() :]


def parse_head(head: bytes) -> ResponseHead:
    """The head of one response (``head`` ends with its blank line)."""
    parsed = ResponseHead(head)
    parser = httptools.HttpResponseParser(parsed)
    try:
        parser.feed_data(head)
    except httptools.HttpParserError as err:
        raise ProtocolError(f"bad response head: {err}") from err
    parsed.status = parser.get_status_code()
    if parsed.status < 100 or not _REASON.fullmatch(parsed.reason):
        line = head.split(b"\r", 1)[0]
        raise ProtocolError(f"bad status line {line[:80]!r}")
    if head.startswith(b"HTTP/"):  # the status line: its version read there, as it came
        parsed.http11 = head[5:8] == b"1.1"
    else:  # after empty lines, which llhttp passes over
        parsed.http11 = parser.get_http_version() == "1.1"
    if not parsed.http11 or len(parsed.codings) > 1:
        parsed.end_to_end = False
    return parsed


class BodyDecoder:
    """Follows one response's body framing over the bytes received.

    ``feed(data)`` returns the body bytes ``data`` completes; ``scan(data)`` returns the
    bytes to relay as they came (see the module docstring); use one or the other for a
    whole response. ``payload`` counts the body bytes taken so far, framing excluded,
    whichever of the two is used (the time series counts body bytes, not wire bytes).
    ``done`` says the body ended; ``eof()`` is called when the lane closed
    the connection and raises if that cuts the body short. ``reusable`` says the
    connection may carry another request. ``framing`` is ``None`` for a bodiless answer.
    """

    # Defaults on the class: one decoder is built per proxied request, most stay content-length.
    done = False
    payload = 0  # body bytes taken so far, chunk framing excluded
    remaining = -1  # content-length framing: bytes still to come
    framing: Framing | None = None
    _chunk_left = 0  # chunked: data bytes left in the current chunk
    _state = "size"  # chunked: size | data | data-end | trailer
    _pending = b""
    # chunked, between two chunks, nothing pending: the one test :meth:`scan` makes
    _boundary = False

    def __init__(self, head: ResponseHead) -> None:
        self.reusable = head.http11 and not head.close
        self._frame(head)

    @property
    def chunked(self) -> bool:
        return self.framing is CHUNKED

    @property
    def until_close(self) -> bool:
        return self.framing is CLOSE

    def _frame(self, head: ResponseHead) -> None:
        if head.status < 200 or head.status in (204, 304):
            self.done = True
            return
        if head.codings:
            chunked = head.codings[-1].rsplit(b",", 1)[-1].strip().lower() == b"chunked"
            self.framing = CHUNKED if chunked else CLOSE
            self._boundary = chunked
        elif head.lengths:  # llhttp refused duplicates and anything but digits
            self.framing = LENGTH
            self.remaining = int(head.lengths[0])
            self.done = self.remaining == 0
        else:
            self.framing = CLOSE
        if self.framing is CLOSE:
            self.reusable = False

    def feed(self, data: bytes) -> bytes:
        return self._take(data, verbatim=False)

    def scan(self, data: bytes) -> bytes:
        if self._boundary:
            # A stream's read, most often one event: one data chunk, its size in lower-case
            # hex without leading zeros (as servers write it), taken whole at once.
            line = data.find(b"\r\n", 0, 18)
            length = len(data) - line - 4
            if line > 0 and length > 0 and data.endswith(b"\r\n") and data[:line] == b"%x" % length:
                self.payload += length
                return data
            pos = self._whole_chunks(data)
            if pos == len(data):
                return data
            data = self._chunks(data, True, pos)
        else:
            data = self._take(data, verbatim=True)
        self._boundary = (
            self.framing is CHUNKED
            and self._state == "size"
            and not self._pending
            and not self.done
        )
        return data

    def _take(self, data: bytes, *, verbatim: bool) -> bytes:
        if self.done:
            if data:
                self.reusable = False  # bytes after the body: the connection is out of step
            return b""
        if self.framing is CLOSE:
            self.payload += len(data)
            return data
        if self.framing is LENGTH:
            if len(data) > self.remaining:
                self.reusable = False
                data = data[: self.remaining]
            self.remaining -= len(data)
            self.payload += len(data)
            self.done = self.remaining == 0
            return data
        if self._pending:
            data = self._pending + data
            self._pending = b""
        if verbatim and self._state == "size":
            pos = self._whole_chunks(data)
            if pos == len(data):
                return data  # the common case of a stream: whole canonical chunks
            return self._chunks(data, verbatim, pos)
        return self._chunks(data, verbatim)

    def _whole_chunks(self, data: bytes) -> int:
        """Skip whole canonical data chunks from the start of ``data``; where they end."""
        pos, size, match, taken = 0, len(data), _WHOLE_CHUNK.match, 0
        while (found := match(data, pos)) is not None:
            length = int(found[1], 16)
            end = found.end() + length
            if not length or not data.startswith(b"\r\n", end):
                break  # the last chunk, or one that does not end in this read
            taken += length
            pos = end + 2
            if pos >= size:
                break
        self.payload += taken
        return pos

    def eof(self) -> None:
        if self.framing is CLOSE:
            self.done = True
        elif not self.done:
            raise ProtocolError("the lane closed the connection in the middle of the body")

    def _chunks(self, data: bytes, verbatim: bool, pos: int = 0) -> bytes:
        """Walk the chunk framing of ``data`` from ``pos`` (the bytes before it are whole
        canonical chunks): the decoded bytes, or the bytes to relay."""
        out: list[bytes] = []
        start = 0  # verbatim: the first byte of ``data`` not yet accounted for in ``out``
        size = len(data)
        while pos < size and not self.done:
            if self._state == "data":
                step = min(self._chunk_left, size - pos)
                if not verbatim:
                    out.append(data[pos : pos + step])
                self.payload += step
                pos += step
                self._chunk_left -= step
                if not self._chunk_left:
                    self._state = "data-end"
                continue
            end = data.find(b"\n", pos)
            if end < 0:  # an incomplete framing line: kept for the next read, not relayed
                self._pending = data[pos:]
                if len(self._pending) > MAX_HEAD:
                    raise ProtocolError("chunk framing line too long")
                break
            state, raw = self._state, data[pos:end]
            self._line(raw.rstrip(b"\r"))
            if verbatim and not self._relayable(state, raw):
                out += (data[start:pos], self._replacement(state))
                start = end + 1
            pos = end + 1
        if self.done and pos < size:
            self.reusable = False
        if not verbatim:
            return b"".join(out)
        if not start and pos == size:
            return data  # the common case: every framing line was canonical
        out.append(data[start:pos])
        return b"".join(out)

    def _relayable(self, state: str, raw: bytes) -> bool:
        """Whether a framing line just read (``raw``, without its LF) may pass as it came."""
        if state == "size":
            return self._state == "data" and _CANONICAL_SIZE.fullmatch(raw) is not None
        return state == "data-end" and raw == b"\r"

    def _replacement(self, state: str) -> bytes:
        """What replaces a framing line that may not pass: canonical, trailers dropped."""
        if state == "size":
            return b"%x\r\n" % self._chunk_left if self._state == "data" else b"0\r\n"
        if state == "data-end":
            return b"\r\n"
        return b"\r\n" if self.done else b""  # a trailer line; the empty one ends it all

    def _line(self, line: bytes) -> None:
        if self._state == "data-end":
            if line:
                raise ProtocolError("chunk data longer than its size")
            self._state = "size"
        elif self._state == "size":
            size = line.split(b";", 1)[0].strip()
            if not _HEX.fullmatch(size):
                raise ProtocolError(f"bad chunk size {line[:40]!r}")
            self._chunk_left = int(size, 16)
            self._state = "data" if self._chunk_left else "trailer"
        elif not line:  # trailer: ends at an empty line (trailers themselves are dropped)
            self.done = True


def retry_after(headers: list[tuple[bytes, bytes]]) -> float | None:
    """The seconds a ``Retry-After`` header asks for (delay-seconds or an HTTP-date, RFC
    9110 §10.2.3), at most :data:`MAX_RETRY_AFTER`; ``None`` without one, or with one
    that is neither."""
    for name, value in headers:
        if name != b"retry-after":
            continue
        text = value.strip()
        if text.isdigit():  # ASCII digits only (bytes)
            seconds = float(text) if len(text) < 12 else MAX_RETRY_AFTER
        else:
            try:
                when = parsedate_to_datetime(text.decode("latin-1"))
            except (TypeError, ValueError, IndexError, OverflowError):
                return None
            if when.tzinfo is None:  # an HTTP-date is GMT; one without a zone is read so
                when = when.replace(tzinfo=timezone.utc)
            seconds = max(0.0, when.timestamp() - time.time())
        return min(seconds, MAX_RETRY_AFTER)
    return None
