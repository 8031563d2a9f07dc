"""The machine's process tree, read once for every stop that needs it at the same time.

Stopping a unit reads the process tree twice: its descendants before the first signal,
and, once it is gone, whatever in ddsup's own subtree still carries its identity. Each
read is one pass over ``/proc`` (every process on the machine), so a stop of N units
would make 2N such passes, all at once. Here concurrent stops share passes: a
caller joins the next pass to start, never one already running (that one may predate
the signal the caller just sent), so each caller still gets a table read after it
asked, and a burst of N stops costs a few passes instead of 2N.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import trio

from ddsup.process import _proc

_SHARED: trio.lowlevel.RunVar[_SharedReads] = trio.lowlevel.RunVar("ddsup_process_table")


@dataclass(frozen=True)
class ProcessTable:
    """Parent → children PIDs of every process on the machine, as one pass read them."""

    children: dict[int, list[int]]

    def descendants(self, pid: int) -> list[int]:
        """``pid``'s children, their children, …, in breadth-first order."""
        found: list[int] = []
        pending = [pid]
        while pending:
            for child in self.children.get(pending.pop(), ()):
                found.append(child)
                pending.append(child)
        return found


def read_process_table() -> ProcessTable:
    """One pass over ``/proc``; processes that end during it are skipped (blocking: a thread)."""
    return ProcessTable(_proc.parent_map())


@dataclass
class _Pass:
    """One pass over ``/proc``: the callers waiting for it share its result."""

    done: trio.Event = field(default_factory=trio.Event)
    table: ProcessTable | None = None
    error: BaseException | None = None


@dataclass
class _SharedReads:
    """The process-table passes of this trio run: the one callers may still join, the one running."""

    next: _Pass | None = None  # the pass new callers join; not started yet
    running: _Pass | None = None


async def process_table() -> ProcessTable:
    """A process table read after this call began, shared with concurrent callers."""
    try:
        shared = _SHARED.get()
    except LookupError:
        shared = _SharedReads()
        _SHARED.set(shared)
    mine = shared.next
    if mine is None:
        mine = shared.next = _Pass()
    while shared.running is not None and shared.running is not mine:
        await shared.running.done.wait()  # it may predate us: wait, then take our turn
    if shared.running is None and shared.next is mine:
        shared.next, shared.running = None, mine  # the first caller to get here reads
        try:
            mine.table = await trio.to_thread.run_sync(read_process_table)
        except BaseException as err:  # a bug in the read: every waiter raises it
            mine.error = err
            raise
        finally:
            shared.running = None
            mine.done.set()
    else:
        await mine.done.wait()
    if mine.table is None:
        raise RuntimeError("the shared read of the process table failed") from mine.error
    return mine.table
