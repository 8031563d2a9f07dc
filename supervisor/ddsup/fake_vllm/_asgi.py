"""The ASGI plumbing the fake's app needs: its message types, a bounded body read, the
client's disconnect as a cancellation, and the lifespan protocol hypercorn speaks."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import trio

from ddsup.fake_vllm._request import RequestError

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

MAX_BODY_BYTES = 32 * 1024 * 1024


class Disconnected(Exception):
    """The client went away before its request body was complete."""


async def read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise Disconnected
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise RequestError(f"The request body is over {MAX_BODY_BYTES} bytes.", status=413)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def cancel_on_disconnect(receive: Receive, scope: trio.CancelScope) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()


async def lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
