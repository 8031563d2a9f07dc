"""A lean HTTP/1.1 response parser for the endpoint's side of the lane connections.

h11 cost about 40 % of a proxied request's CPU as the *client* of the lanes, mostly in
checks that matter for arbitrary peers; the endpoint writes every request itself and
talks only to its own lanes, so this side parses responses directly: the status line
and headers, then the body framing (Content-Length, chunked, or until close). The
client side of the endpoint (untrusted input) stays on h11.

Pure code over bytes, no I/O: :class:`ResponseHead` from :func:`parse_head`, and a
:class:`BodyDecoder` fed with received bytes that hands back body data as it arrives.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_HEAD = 64 * 1024
_HEAD_END = re.compile(rb"\r?\n\r?\n")
_STATUS = re.compile(rb"HTTP/1\.([01]) ([1-9][0-9][0-9])(?: ([^\r\n]*))?")
_TOKEN = re.compile(rb"[-!#$%&'*+.^_`|~0-9a-zA-Z]+")
_HEX = re.compile(rb"[0-9a-fA-F]{1,16}")


class ProtocolError(Exception):
    """The lane's response is not valid HTTP/1.1 (or was cut short)."""


@dataclass(frozen=True)
class ResponseHead:
    """Status line and headers (names lower-case) of one response."""

    status: int
    reason: bytes
    headers: list[tuple[bytes, bytes]]
    http11: bool

    def keep_alive(self) -> bool:
        if not self.http11:
            return False
        return not any(n == b"connection" and b"close" in v.lower() for n, v in self.headers)


def split_head(buffer: bytes) -> tuple[bytes, bytes] | None:
    """(head, rest) once ``buffer`` holds a complete head, else ``None``."""
    match = _HEAD_END.search(buffer)
    if match is None:
        if len(buffer) > MAX_HEAD:
            raise ProtocolError(f"response head over {MAX_HEAD} bytes")
        return None
    return buffer[: match.start()], buffer[match.end() :]


def parse_head(head: bytes) -> ResponseHead:
    lines = head.split(b"\n")
    status = _STATUS.fullmatch(lines[0].rstrip(b"\r"))
    if status is None:
        raise ProtocolError(f"bad status line {lines[0][:80]!r}")
    headers = []
    for raw in lines[1:]:
        line = raw.rstrip(b"\r")
        name, colon, value = line.partition(b":")
        if not colon or not _TOKEN.fullmatch(name):
            raise ProtocolError(f"bad header line {line[:80]!r}")
        headers.append((name.lower(), value.strip(b" \t")))
    reason = status.group(3) or b""
    return ResponseHead(int(status.group(2)), reason, headers, status.group(1) == b"1")


class BodyDecoder:
    """Turns received bytes into body data for one response's framing.

    ``feed(data)`` returns the body bytes ``data`` completes; ``done`` says the body
    ended; ``eof()`` is called when the lane closed the connection and raises if that
    cuts the body short. ``reusable`` says the connection may carry another request.
    """

    def __init__(self, head: ResponseHead) -> None:
        self.done = False
        self.remaining = -1  # content-length framing: bytes still to come
        self.chunked = False
        self.until_close = False
        self._chunk_left = 0  # chunked: data bytes left in the current chunk
        self._state = "size"  # chunked: size | data | data-end | trailer
        self._pending = b""
        self.reusable = head.keep_alive()
        self._frame(head)

    def _frame(self, head: ResponseHead) -> None:
        if head.status < 200 or head.status in (204, 304):
            self.done = True
            return
        codings = [v for n, v in head.headers if n == b"transfer-encoding"]
        lengths = {v for n, v in head.headers if n == b"content-length"}
        if codings:
            self.chunked = codings[-1].rsplit(b",", 1)[-1].strip().lower() == b"chunked"
            self.until_close = not self.chunked
        elif lengths:
            if len(lengths) > 1 or not lengths.copy().pop().isdigit():
                raise ProtocolError(f"bad content-length {sorted(lengths)!r}")
            self.remaining = int(lengths.pop())
            self.done = self.remaining == 0
        else:
            self.until_close = True
        if self.until_close:
            self.reusable = False

    def feed(self, data: bytes) -> bytes:
        if self.done:
            if data:
                self.reusable = False  # bytes after the body: the connection is out of step
            return b""
        if self.until_close:
            return data
        if not self.chunked:
            if len(data) > self.remaining:
                self.reusable = False
                data = data[: self.remaining]
            self.remaining -= len(data)
            self.done = self.remaining == 0
            return data
        return self._feed_chunked(self._pending + data if self._pending else data)

    def eof(self) -> None:
        if self.until_close:
            self.done = True
        elif not self.done:
            raise ProtocolError("the lane closed the connection in the middle of the body")

    def _feed_chunked(self, data: bytes) -> bytes:
        out: list[bytes] = []
        pos = 0
        self._pending = b""
        while pos < len(data) and not self.done:
            if self._state == "data":
                piece = data[pos : pos + self._chunk_left]
                out.append(piece)
                pos += len(piece)
                self._chunk_left -= len(piece)
                if not self._chunk_left:
                    self._state = "data-end"
                continue
            end = data.find(b"\n", pos)
            if end < 0:
                self._pending = data[pos:]
                if len(self._pending) > MAX_HEAD:
                    raise ProtocolError("chunk framing line too long")
                break
            line = data[pos:end].rstrip(b"\r")
            pos = end + 1
            self._line(line)
        if self.done and pos < len(data):
            self.reusable = False
        return b"".join(out)

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
