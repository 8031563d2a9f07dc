"""The request bodies one endpoint process holds in memory at once, and their bound.

A proxied request's body is read whole (the model is in it) and kept until the request
ends, because a retry on another lane sends it again. Each body is capped
(``max_body_bytes``), but without a bound on their sum, many large bodies at once
exhaust memory (thousands of concurrent requests with bodies near the cap; a body costs
several times its size in RSS). So each process keeps a budget of ``max_buffered_bytes``: a body is
reserved before it is read (its Content-Length; a chunked body, rare, reserves the cap
and gives back what it did not use), and a request that does not fit is refused at once
with 429 and ``Retry-After`` rather than read.
"""

from __future__ import annotations


class BodyBudget:
    """Bytes of request bodies reserved in this process, at most ``capacity``."""

    __slots__ = ("capacity", "used")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0

    def reserve(self, size: int) -> bool:
        """Take ``size`` bytes when they fit; ``False`` (nothing taken) when not."""
        if self.used + size > self.capacity:
            return False
        self.used += size
        return True

    def release(self, size: int) -> None:
        self.used -= size
