"""The request bodies one endpoint process holds in memory at once, and their bound.

A proxied request's body is read whole (the model is in it) and kept until the request
ends, because a retry on another lane sends it again. Each body is capped
(``max_body_bytes``), but without a bound on their sum, many large bodies at once
exhaust memory (thousands of concurrent requests with bodies near the cap). So each process keeps a
budget of ``max_buffered_bytes``.

The budget is charged with the bytes that have arrived, as they arrive, never with what
a request declares: a Content-Length (or a chunk size) costs a client nothing to write.
Charged up front, 16 connections that each declare 32 MiB and send one byte would fill
512 MiB and lock every other client out until the body timeout cut them off. A body
whose next bytes do not fit is refused then, with 429 and ``Retry-After``, and the rest
is not read.

Bytes of bodies still arriving are also bounded per client address (``share``): a
client that trickles many bodies at once from one address holds at most that much, and
the rest of the budget stays for other addresses. A body counts against its address
only while it arrives; once whole it is a request being served, charged to the budget
alone. Most bodies come whole with their request head and never meet the share.
"""

from __future__ import annotations

from collections.abc import Callable


class OverBudget(Exception):
    """The next bytes of a body do not fit; the message says which bound they pass."""


class BodyBudget:
    """Bytes of request bodies held in this process (at most ``capacity``), and of those
    still arriving, by client address (at most ``share`` each)."""

    __slots__ = ("arriving", "capacity", "share", "used")

    def __init__(self, capacity: int, share: int | None = None) -> None:
        self.capacity = capacity
        self.share = capacity if share is None else share
        self.used = 0
        self.arriving: dict[str, int] = {}

    def account(self, peer: Callable[[], str]) -> BodyAccount:
        """The account of one request's body; ``peer()`` names its client's address
        (asked only if the body arrives in pieces)."""
        return BodyAccount(self, peer)


class BodyAccount:
    """One request body's bytes in a :class:`BodyBudget`; :meth:`release` gives them back.

    The client connection charges each piece as it reads it: :meth:`whole` for a body
    that came in one piece, :meth:`arrived` for a piece of one still arriving, then
    :meth:`complete` once the body is whole.
    """

    __slots__ = ("_address", "_arriving", "_budget", "_peer", "held")

    def __init__(self, budget: BodyBudget, peer: Callable[[], str]) -> None:
        self._budget = budget
        self._peer = peer
        self._address: str | None = None
        self._arriving = 0  # of ``held``, what counts against the address
        self.held = 0

    def whole(self, size: int) -> None:
        """Charge a whole body of ``size`` bytes; :class:`OverBudget` when it does not fit."""
        budget = self._budget
        if budget.used + size > budget.capacity:
            raise OverBudget(f"{budget.capacity} bytes of request bodies in memory")
        budget.used += size
        self.held += size

    def arrived(self, size: int) -> None:
        """Charge ``size`` more bytes of a body still arriving (both bounds)."""
        budget = self._budget
        address = self._address
        if address is None:
            address = self._address = self._peer()
        mine = budget.arriving.get(address, 0)
        if mine + size > budget.share:
            where = f"the client address {address}" if address else "one client address"
            raise OverBudget(f"{budget.share} bytes of request bodies still arriving from {where}")
        self.whole(size)
        budget.arriving[address] = mine + size
        self._arriving += size

    def complete(self) -> None:
        """The body is whole: its bytes no longer count against its client's address."""
        if self._arriving:
            assert self._address is not None
            budget = self._budget
            left = budget.arriving[self._address] - self._arriving
            if left:
                budget.arriving[self._address] = left
            else:
                del budget.arriving[self._address]
            self._arriving = 0

    def release(self) -> None:
        """Give every byte back (the request ended, however it ended)."""
        self.complete()
        self._budget.used -= self.held
        self.held = 0
