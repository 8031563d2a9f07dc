"""A client's requests as httptools parses them, one request at a time, and what is refused.

httptools calls back for each header, for each piece of a body and at the message's
end; :class:`HeadFields` keeps what the endpoint decides on (Content-Length, the
Transfer-Encoding, how many Host headers, Connection, Expect, Upgrade) and, on the way,
the header lines a lane gets; then the body's decoded pieces and whether it ended.
:class:`RequestParser` feeds it one whole head (:func:`head_end` finds it) and then that
request's body (a chunked body's end found by :class:`ChunkedEnd`), and says which
requests are refused as they stand (see :mod:`._client`'s docstring).
"""

from __future__ import annotations

import logging
import re

import httptools

from ddsup.endpoint._api_errors import (
    ApiError,
    ambiguous_framing,
    too_large,
    tunnel_refused,
    version_not_supported,
    websocket_refused,
)
from ddsup.endpoint._notices import NOTICES
from ddsup.endpoint._proxy import REQUEST_DROP

# A request line that names an HTTP version, whatever the parser made of the rest.
_VERSIONED = re.compile(rb"[!-~]+ [^ \r\n]+ HTTP/([0-9]{1,3}\.[0-9]{1,3})\r?\n")
_BLANK_LINE = re.compile(rb"\n\r?\n")  # a head's end, whatever its line ends
_BARE_LF = re.compile(rb"(?<!\r)\n")
_UPGRADE_LINE = re.compile(rb"(?im)^upgrade:[^\n]*\n")
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,16})[^\r\n]*\r\n")  # a size, then any extension
MAX_FRAMING_LINE = 4096  # a chunk's size line (extensions included) or a trailer line


def refused(status: int, message: str) -> ApiError:
    return ApiError(status, "invalid_request_error", message, close=True)


class HeadFields:
    """httptools' callbacks for one request.

    On the way it collects the header lines a lane gets (``forwarded``), which saves the
    proxy a second pass; a Connection header that names other headers (which must then
    be dropped as well) leaves that to the proxy (``listed``).

    The body's callbacks are methods of builtins, called without a Python frame (each
    request's body passes through the parser): ``on_body`` appends to ``body``, and
    ``on_message_complete`` empties ``_open``. httptools takes the callbacks when a
    parser is made, so ``body`` and ``_open`` stay the same objects from one request to
    the next.
    """

    __slots__ = (
        "_open",
        "alive",
        "body",
        "close",
        "codings",
        "content_length",
        "continue_expected",
        "forwarded",
        "headers",
        "hosts",
        "listed",
        "on_body",
        "on_message_complete",
        "upgrades",
    )

    def __init__(self) -> None:
        self.body: list[bytes] = []
        self._open: set[bool] = set()
        self.on_body = self.body.append
        self.on_message_complete = self._open.clear
        self.reset()

    def reset(self) -> None:
        """Ready for the next request. A method: assigned at the caller, the fields would be
        None to a type checker (and to mypyc) though the parser's callbacks change them."""
        self.headers: list[tuple[bytes, bytes]] = []
        self.forwarded: list[bytes] = []
        self.content_length: int | None = None
        self.codings: list[bytes] = []  # Transfer-Encoding values
        self.upgrades: list[bytes] = []  # Upgrade values
        self.hosts = 0  # Host headers: HTTP/1.1 needs exactly one
        self.close = False  # Connection: close
        self.alive = False  # Connection: keep-alive (what keeps an HTTP/1.0 connection)
        self.listed = False  # Connection names more than keep-alive and close
        self.continue_expected = False  # Expect: 100-continue
        self.body.clear()
        self._open.add(True)  # until the parser sees the message's end

    @property
    def complete(self) -> bool:
        """The parser saw the message's end."""
        return not self._open

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if value[-1:] in (b" ", b"\t"):
            value = value.rstrip(b" \t")  # llhttp strips the leading OWS only
        self.headers.append((name, value))
        if name not in REQUEST_DROP and not name.startswith(b"proxy-"):
            self.forwarded.append(b"%s: %s\r\n" % (name, value))
        elif name == b"host":
            self.hosts += 1
        elif name == b"content-length":
            self.content_length = int(value)  # llhttp checked: digits, no overflow, one only
        elif name == b"transfer-encoding":
            self.codings.append(value)
        elif name == b"expect":
            self.continue_expected = value.lower() == b"100-continue"
        elif name == b"upgrade":
            self.upgrades.append(value)
        elif name == b"connection":
            tokens = {token.strip() for token in value.lower().split(b",")}
            self.close = b"close" in tokens
            self.alive = b"keep-alive" in tokens
            self.listed = self.listed or not tokens <= {b"close", b"keep-alive"}


class RequestParser:
    """httptools' parser of one connection's requests, and what it keeps of the current one."""

    __slots__ = ("_parser", "fields")

    def __init__(self) -> None:
        self.fields = HeadFields()
        self._parser = httptools.HttpRequestParser(self.fields)

    def head(self, head: bytes) -> tuple[bytes, bytes, bool]:
        """(method, target, whether HTTP/1.0) of the request whose whole head is ``head``;
        :class:`ApiError` (with ``close``) when it is refused as it stands."""
        if head.count(b"\n") != head.count(b"\r\n"):  # a bare LF; rare: llhttp takes CRLF only
            head = _BARE_LF.sub(b"\r\n", head)  # (a search for it walks the head in a regex)
        self.fields.reset()
        parser = self._parser
        try:
            parser.feed_data(head)
        except httptools.HttpParserUpgrade:
            parser = self._upgrade_declined(head)
        except httptools.HttpParserError as err:
            _check_version(head)
            if b"transfer-encoding" in head.lower() and b"content-length" in head.lower():
                raise ambiguous_framing() from None
            raise refused(400, f"malformed request head: {err}") from None
        method = parser.get_method()
        # llhttp passed "METHOD SP+ target SP+ HTTP/d.d CRLF": the target lies between (no
        # on_url callback, which cost a Python call per request; extra spaces leave a
        # space in it), and the version is read there too (the parser's getter formats a
        # string per call).
        line_end = head.find(b"\r\n")
        target = head[len(method) + 1 : line_end - 9]
        version = head[line_end - 3 : line_end]
        if version != b"1.1" and version != b"1.0":  # or an empty line first: ask the parser
            named = parser.get_http_version()
            if named not in ("1.1", "1.0"):
                raise version_not_supported(named)
            version = named.encode()
        http10 = version == b"1.0"
        refusal = _refusal(self.fields, method, target, http10)
        if refusal is not None:
            raise refusal
        return method, target, http10

    def _upgrade_declined(self, head: bytes) -> httptools.HttpRequestParser:
        """llhttp stopped at an offer to switch protocols (or CONNECT), taking the message
        to have no body: a new parser, fed the head without its Upgrade lines, frames it
        as if there had been no offer. CONNECT and WebSocket are refused later, from the
        headers collected."""
        offered = self.fields.upgrades
        if offered and self._parser.get_method() != b"CONNECT":
            self.fields.reset()
            self._parser = httptools.HttpRequestParser(self.fields)
            self._parser.feed_data(_UPGRADE_LINE.sub(b"", head))
            self.fields.upgrades = offered
            return self._parser
        stopped = self._parser  # CONNECT: refused, from what this parser read
        self._parser = httptools.HttpRequestParser(self.fields)
        return stopped

    def body(self, data: bytes) -> None:
        """Feed bytes of the request's body (no more than it has)."""
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:  # the message ended; its upgrade is declined
            self._parser = httptools.HttpRequestParser(self.fields)
        except httptools.HttpParserError as err:
            raise refused(400, f"malformed request body: {err}") from None


def _check_version(buf: bytes) -> None:
    """505 when the request line names an HTTP version other than 1.0 and 1.1."""
    versioned = _VERSIONED.match(buf)
    if versioned is not None and versioned.group(1) not in (b"1.0", b"1.1"):
        raise version_not_supported(versioned.group(1).decode())


def head_end(buf: bytes) -> int:
    """The index just after the blank line that ends the head at the start of ``buf``
    (``-1`` while there is none); a line may end in ``\\n`` alone."""
    end = buf.find(b"\r\n\r\n")
    if end >= 0 and buf.count(b"\n", 0, end) == buf.count(b"\r\n", 0, end):
        return end + 4
    if buf.find(b"\n") < 0:  # not ``in``: on bytes, that first tries the operand as an int
        return -1
    blank = _BLANK_LINE.search(buf)
    return -1 if blank is None else blank.end()


def _refusal(proto: HeadFields, method: bytes, target: bytes, http10: bool) -> ApiError | None:
    """Why a request llhttp took is refused all the same (see the module docstring)."""
    if target.find(b" ") >= 0:  # not ``in``, which costs an exception (see head_end)
        return refused(400, "more than one space between the parts of the request line")
    if not target.isascii():
        return refused(400, "the request target is not ASCII")
    if proto.hosts > 1:
        return refused(400, "Found multiple Host headers")
    if not proto.hosts and not http10:
        return refused(400, "Missing mandatory Host header")
    if proto.codings and [c.strip().lower() for c in proto.codings] != [b"chunked"]:
        return ApiError(
            501, "invalid_request_error", "only Transfer-Encoding: chunked is supported", close=True
        )
    if method == b"CONNECT":
        NOTICES.note("connect", logging.INFO, "refused a CONNECT request (405): no tunnels")
        return tunnel_refused()
    if proto.upgrades and any(_names_websocket(value) for value in proto.upgrades):
        NOTICES.note("websocket", logging.INFO, "refused a WebSocket handshake (400)")
        return websocket_refused()
    return None


def _names_websocket(upgrade: bytes) -> bool:
    """Whether an Upgrade header offers WebSocket (``websocket``, or ``websocket/13``)."""
    return any(
        offer.split(b"/", 1)[0].strip().lower() == b"websocket" for offer in upgrade.split(b",")
    )


class ChunkedEnd:
    """Where a chunked body ends, found from its framing lines alone: the parser is then
    fed exactly that body, and the bytes after it are the next request's. It checks
    nothing the parser checks; a line it cannot read ends the body where it stands (the
    parser then refuses it). Refuses with 413 the chunk that takes the declared total
    over ``limit``. It reads the bytes as they arrive, never twice: the caller drops
    what lies before :attr:`pos` (:meth:`shift`)."""

    __slots__ = ("declared", "limit", "need", "pos", "trailer")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.pos = 0  # where the next framing line (or the trailer section) starts
        self.need = 0  # bytes of chunk data (and its CRLF) still to pass over
        self.declared = 0
        self.trailer = False

    def find(self, raw: bytes) -> int:
        """The index just after the body in ``raw``, or ``-1`` while more must come."""
        pos = self.pos
        while not self.trailer:
            if self.need:
                step = min(self.need, len(raw) - pos)
                self.need -= step
                pos += step
                if self.need:
                    self.pos = pos
                    return -1
            size_line = _CHUNK_SIZE.match(raw, pos)
            if size_line is None:
                if raw.find(b"\n", pos) < 0 and len(raw) - pos <= MAX_FRAMING_LINE:
                    self.pos = pos
                    return -1  # the line is not whole yet
                return len(raw)  # not a size line: the parser says what is wrong
            size = int(size_line[1], 16)
            self.declared += size
            if self.declared > self.limit:
                raise too_large(self.limit)
            pos = size_line.end()
            if not size:
                self.trailer = True
            else:
                self.need = size + 2
        self.pos = pos
        if raw.startswith(b"\r\n", pos):
            return pos + 2
        end = raw.find(b"\r\n\r\n", pos)
        if end >= 0:
            return end + 4
        if len(raw) - pos > MAX_FRAMING_LINE * 4:
            return len(raw)  # trailers without end: the parser says what is wrong
        return -1

    def shift(self) -> int:
        """How many bytes at the start may be dropped; :attr:`pos` counts from there on."""
        done, self.pos = self.pos, 0
        return done
