"""Typed JSON errors the endpoint answers with, in the OpenAI error shape.

Clients of an OpenAI-compatible API parse ``{"error": {...}}``; every refusal the
endpoint itself makes (as opposed to a lane's own answer, which passes through) is one
:class:`ApiError`, so a handler raises it and the server turns it into bytes in one
place. The object has the members of vLLM's ``ErrorResponse`` (``message``, ``type``,
``param``, ``code``): ``code`` is the HTTP status, ``type`` a stable machine-readable
word, ``param`` the request member at fault (``model``) or null.
"""

from __future__ import annotations

import json


class ApiError(Exception):
    """A refusal with an HTTP status, a stable ``type`` and a human message.

    A plain class, not a frozen dataclass: the interpreter and trio set attributes such
    as ``__traceback__`` on exceptions in flight.
    """

    def __init__(
        self,
        status: int,
        type: str,
        message: str,
        retry_after: float | None = None,
        extra: tuple[tuple[str, object], ...] = (),
        head: tuple[tuple[bytes, bytes], ...] = (),
        *,
        close: bool = False,
        param: str | None = None,
    ) -> None:
        super().__init__(status, type, message)
        self.status = status
        self.type = type
        self.message = message
        self.retry_after = retry_after
        self.extra = extra  # more members of the JSON error object
        self.head = head  # more response headers (Allow, WWW-Authenticate, …)
        self.close = close  # the connection cannot carry another request after this
        self.param = param

    def __str__(self) -> str:
        return f"{self.status} {self.type}: {self.message}"

    def body(self) -> bytes:
        error: dict[str, object] = {
            "type": self.type,
            "code": self.status,
            "message": self.message,
            "param": self.param,
        }
        if self.retry_after is not None:
            error["retry_after"] = _seconds(self.retry_after)
        error.update(self.extra)
        return json.dumps({"error": error}).encode()

    def headers(self) -> list[tuple[bytes, bytes]]:
        if self.retry_after is None:
            return list(self.head)
        return [retry_after_header(self.retry_after), *self.head]


def retry_after_header(seconds: float) -> tuple[bytes, bytes]:
    return (b"retry-after", str(_seconds(seconds)).encode())


def _seconds(value: float) -> int:
    """``Retry-After`` takes whole seconds; round up so a client never retries too early."""
    return max(1, -int(-value // 1))


def bad_request(message: str) -> ApiError:
    return ApiError(400, "invalid_request_error", message)


def unauthorized() -> ApiError:
    return ApiError(
        401,
        "unauthorized",
        "missing or wrong bearer token (Authorization: Bearer …)",
        head=((b"www-authenticate", b"Bearer"),),
    )


def not_found(path: str) -> ApiError:
    return ApiError(404, "not_found", f"no route for {path!r}")


def unknown_model(model: str, known: list[str]) -> ApiError:
    served = ", ".join(known) or "none"
    return ApiError(
        404,
        "model_not_found",
        f"model {model!r} is not served here (served: {served})",
        param="model",
    )


def method_not_allowed(method: str, path: str, allow: str) -> ApiError:
    """``allow``: the methods the path takes (the ``Allow`` header RFC 9110 asks for)."""
    return ApiError(
        405,
        "method_not_allowed",
        f"{method} is not allowed on {path!r} (use {allow})",
        head=((b"allow", allow.encode()),),
    )


def request_timeout(what: str) -> ApiError:
    return ApiError(408, "request_timeout", f"the client was too slow sending the {what}")


def header_too_large(limit: int) -> ApiError:
    return ApiError(
        431,
        "request_header_too_large",
        f"request head over the limit of {limit} bytes",
        close=True,
    )


def version_not_supported(version: str) -> ApiError:
    return ApiError(
        505,
        "http_version_not_supported",
        f"HTTP/{version} is not supported: send HTTP/1.1 (or HTTP/1.0)",
        close=True,
    )


def ambiguous_framing() -> ApiError:
    """Content-Length and Transfer-Encoding together: the request smuggling shape."""
    return ApiError(
        400,
        "invalid_request_error",
        "the request has both Content-Length and Transfer-Encoding; send one of them",
        close=True,
    )


def too_large(limit: int) -> ApiError:
    return ApiError(413, "request_too_large", f"request body over the limit of {limit} bytes")


def overloaded(model: str | None, retry_after: float, why: str) -> ApiError:
    subject = f"every ready lane of model {model!r}" if model else "the endpoint"
    return ApiError(
        429, "overloaded", f"{subject} is at capacity ({why}); retry later", retry_after
    )


def internal_error() -> ApiError:
    return ApiError(500, "internal_error", "the endpoint hit an internal error; it was logged")


def upstream_failed(model: str, attempts: list[str]) -> ApiError:
    tried = "; ".join(attempts)
    return ApiError(
        502,
        "upstream_failed",
        f"every tried lane of model {model!r} failed: {tried}",
        extra=(("attempts", attempts),),
    )


def no_lane_answered(path: str, retry_after: float) -> ApiError:
    """No lane is ready to answer a question about the lanes (``/version``)."""
    return ApiError(503, "no_ready_lane", f"no lane is ready to answer {path}", retry_after)


def no_ready_lane(model: str, retry_after: float) -> ApiError:
    return ApiError(
        503, "no_ready_lane", f"model {model!r} has no ready lane right now", retry_after
    )


def tunnel_refused() -> ApiError:
    """CONNECT: the endpoint is no proxy; the connection ends after the answer."""
    return ApiError(
        405,
        "method_not_allowed",
        "CONNECT is not allowed: the endpoint tunnels nothing (use GET, HEAD or POST)",
        head=((b"allow", b"GET, HEAD, POST"),),
        close=True,
    )


def websocket_refused() -> ApiError:
    """A WebSocket handshake: no route of the endpoint speaks it."""
    return ApiError(
        400,
        "invalid_request_error",
        "the endpoint serves no WebSocket route (Upgrade: websocket); send plain HTTP/1.1",
        close=True,
    )
