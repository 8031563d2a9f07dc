"""What the fast path keeps of a request head while httptools parses it.

httptools calls back for each header; :class:`HeadFields` keeps what the fast path
decides on (Content-Length, how many Host headers, whether anything sends the request to
h11, Connection) and, on the way, the header lines a lane gets.
"""

from __future__ import annotations

from ddsup.endpoint._proxy import REQUEST_DROP


class HeadFields:
    """httptools' callbacks for one request head.

    On the way it collects the header lines a lane gets (``forwarded``), which saves the
    proxy a second pass; a Connection header that names other headers (which must then
    be dropped as well) leaves that to the proxy (``listed``).
    """

    __slots__ = ("close", "content_length", "forwarded", "headers", "hosts", "listed", "odd")

    def __init__(self) -> None:
        self.headers: list[tuple[bytes, bytes]] = []
        self.forwarded: list[bytes] = []
        self.content_length: int | None = None
        self.hosts = 0  # Host headers: HTTP/1.1 needs exactly one (h11 answers the rest)
        self.odd = False  # a header that sends the request to h11
        self.close = False  # Connection: close
        self.listed = False  # Connection names more than keep-alive and close

    def reset(self) -> None:
        """Ready for the next head. A method: assigned at the caller, the fields would be
        None to a type checker (and to mypyc) though the parser's callbacks change them."""
        self.headers = []
        self.forwarded = []
        self.content_length = None
        self.hosts = 0
        self.odd = self.close = self.listed = False

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
        elif name in (b"transfer-encoding", b"expect", b"upgrade"):
            self.odd = True
        elif name == b"connection":
            tokens = {token.strip() for token in value.lower().split(b",")}
            self.close = b"close" in tokens
            self.listed = self.listed or not tokens <= {b"close", b"keep-alive"}
