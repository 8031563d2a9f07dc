"""The one bounded poll, for conditions no event announces.

Another process's file, a process's end that is not our child, a line on a terminal:
there is nothing to await, so these look again every ``interval`` until ``limit``
seconds have passed, then fail saying what they waited for. Everything that has an
event (our own child's exit, a trio.Event) awaits it instead.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import trio

T = TypeVar("T")


async def until(
    condition: Callable[[], T],
    what: str | Callable[[], str],
    *,
    limit: float = 15.0,
    interval: float = 0.02,
) -> T:
    """The first truthy value of ``condition()``; AssertionError after ``limit`` seconds."""
    with trio.move_on_after(limit):
        while not (value := condition()):  # noqa: ASYNC110 (no event exists: bounded poll)
            await trio.sleep(interval)
        return value
    raise AssertionError(f"timed out after {limit:g}s waiting for {_text(what)}")


def until_sync(
    condition: Callable[[], T],
    what: str | Callable[[], str],
    *,
    limit: float = 15.0,
    interval: float = 0.05,
) -> T:
    """:func:`until` for synchronous tests."""
    deadline = time.monotonic() + limit
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {limit:g}s waiting for {_text(what)}")
        time.sleep(interval)
    return value


def _text(what: str | Callable[[], str]) -> str:
    return what if isinstance(what, str) else what()
