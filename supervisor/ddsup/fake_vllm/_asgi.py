"""The ASGI plumbing the fake's app needs: its message types (hypercorn's own typed
ones, which the server that runs the app speaks), a bounded body read, the client's
disconnect as a cancellation, and the lifespan protocol hypercorn speaks."""

from __future__ import annotations

import trio
from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable
from hypercorn.typing import HTTPResponseStartEvent as HTTPResponseStartEvent
from hypercorn.typing import HTTPScope as HTTPScope
from hypercorn.typing import Scope as Scope

from ddsup.fake_vllm._request import RequestError

Receive = ASGIReceiveCallable
Send = ASGISendCallable

MAX_BODY_BYTES = 32 * 1024 * 1024


class Disconnected(Exception):
    """The client went away before its request body was complete."""


async def read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":  # http.disconnect: the only other one
            raise Disconnected
        chunk = message["body"]
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise RequestError(f"The request body is over {MAX_BODY_BYTES} bytes.", status=413)
        chunks.append(chunk)
        if not message["more_body"]:
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
