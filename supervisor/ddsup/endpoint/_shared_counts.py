"""Requests in flight per lane, counted by every endpoint worker in one shared table.

Admission (``max_queue_per_lane``, ``max_concurrent``) and the choice of the least busy
lane need each lane's outstanding requests over *all* workers. Each worker owns one row
of a table in shared memory (a ``memfd`` every worker maps) and only ever writes its
own row; a reader adds the rows up. Slot 0 counts requests in flight at all (for
``max_concurrent``); each lane has its own slot from 1 on, assigned by the parent.

Writes need no lock: one writer per cell, and an aligned 8-byte store is a single
instruction on the machines ddsup runs on (x86-64, aarch64), so a reader sees either
the old or the new count, never a torn one. A worker's check ("the lane's total is under
the limit") and its increment happen without a checkpoint in between, so within a
worker they are atomic; across workers, each of the other ``workers - 1`` may pass the
same check before it sees this worker's increment. Hence the error bound documented in
``docs/cli.md``: a lane holds at most ``max_queue_per_lane + workers - 1`` requests from
this endpoint, the process at most ``max_concurrent + workers - 1``, and a choice of the
least busy lane can be off by as many requests.

The layout is slot-major (``[slot][row]``) so that a total is the sum of one contiguous
slice, summed in C. Unused slots cost nothing: the kernel gives a ``memfd`` pages only
when they are touched.

After the counts, each slot has :data:`CELLS` cells that every worker reads and writes
(:meth:`SharedCounts.cell`, :meth:`SharedCounts.set_cell`): a lane's passive-ejection
state (:mod:`._ejection`), shared so that a lane ejected by one worker is out of every
worker's rotation, and the mark a worker sets when it sends the lane a request, which the
sampler reads and clears (:mod:`._metrics_sampler`). Several writers may race on them;
each store is still whole, so the worst a race does is lose one update of a failure count
(documented with ejection) or one mark (documented with the sampler).

Last, each row has a journal: a ring of the last :data:`JOURNAL` slots its writer
changed (a count, or a cell through :meth:`SharedCounts.set_cell`) and the number of
changes so far. A reader that keeps an index of the lanes by their counts
(:mod:`._admission`) reads the journals since it last looked (:meth:`SharedCounts.changes`)
and re-reads only those slots, so that it follows every worker's changes at a cost that
does not grow with the number of lanes. The writer stores the count, then the slot into
the ring, then the number of changes; a reader that finds more than :data:`JOURNAL`
changes since it last looked has lost some, and re-reads everything (``None``). On
x86-64 stores are seen in the order they were made, so a reader that sees the number
sees the entry and the count; aarch64 may reorder them (CPython has no barrier to
offer), and a reader may then read an entry before its count or an old entry: it misses
that change until the slot changes again or it re-reads everything (once a second).
:meth:`SharedCounts.mark` stores a cell without a journal entry (the per-request
``BEGUN`` mark, which no index reads).
"""

from __future__ import annotations

import mmap
import os

SLOTS = 1 << 16  # distinct lanes over the endpoint's lifetime, plus slot 0
ACTIVE = 0  # the slot of requests in flight at all
CELLS = 4  # shared cells per slot, after the counts (see the module docstring)
JOURNAL = 1 << 12  # slots in each row's ring of recent changes (a power of two)
_MASK = JOURNAL - 1
_ITEM = 8  # bytes per count (signed 64 bit)


def _size(rows: int) -> int:
    return ((rows + CELLS) * SLOTS + rows * (1 + JOURNAL)) * _ITEM


class SharedCounts:
    """One view of the table: ``rows`` rows, of which this process writes ``row``."""

    __slots__ = ("_cells", "_head", "_map", "_view", "fd", "row", "rows")

    def __init__(self, fd: int | None, rows: int, row: int) -> None:
        """Map the table in ``fd`` (``None``: private memory, for a single process)."""
        if not 0 <= row < rows:
            raise ValueError(f"row {row} outside a table of {rows} rows")
        self.fd = fd
        self.rows = rows
        self.row = row
        self._map = mmap.mmap(-1 if fd is None else fd, _size(rows))
        self._view = memoryview(self._map).cast("q")
        self._cells = self._view[rows * SLOTS : (rows + CELLS) * SLOTS]
        self._head = self._journal(row)  # this row's count of changes; its ring follows

    def _journal(self, row: int) -> int:
        """Where ``row``'s count of changes is; its ring is the :data:`JOURNAL` items after."""
        return (self.rows + CELLS) * SLOTS + row * (1 + JOURNAL)

    def _note(self, slot: int) -> None:
        """Journal a change of ``slot`` (after the change itself: see the docstring)."""
        view, head = self._view, self._head
        done = view[head]
        view[head + 1 + (done & _MASK)] = slot
        view[head] = done + 1

    @classmethod
    def private(cls) -> SharedCounts:
        """A one-row table in this process's memory (an endpoint with one worker)."""
        return cls(None, 1, 0)

    @classmethod
    def create(cls, rows: int, row: int) -> SharedCounts:
        """A new zeroed table in a ``memfd`` (pass :attr:`fd` to the other processes)."""
        fd = os.memfd_create("ddsup-endpoint-counts", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, _size(rows))
            return cls(fd, rows, row)
        except BaseException:
            os.close(fd)
            raise

    def add(self, slot: int, delta: int) -> None:
        """Change this process's count of ``slot`` (its own cell only)."""
        view, head = self._view, self._head
        view[slot * self.rows + self.row] += delta
        done = view[head]  # then the journal (see the module docstring), inline: per request
        view[head + 1 + (done & _MASK)] = slot
        view[head] = done + 1

    def total(self, slot: int) -> int:
        """The count of ``slot`` over every row (see the module docstring for its bound)."""
        rows = self.rows
        if rows == 1:
            return self._view[slot]
        start = slot * rows
        return sum(self._view[start : start + rows])

    def own(self, slot: int) -> int:
        """Where this process's count of ``slot`` lies in :attr:`view`."""
        return slot * self.rows + self.row

    def cell_index(self, slot: int, cell: int) -> int:
        """Where shared cell ``cell`` of ``slot`` lies in :attr:`view`."""
        return self.rows * SLOTS + slot * CELLS + cell

    @property
    def view(self) -> memoryview:
        """The whole table as 64-bit items, for a reader that indexes it per request
        (:meth:`own`, :meth:`cell_index`) rather than call a method per read."""
        return self._view

    def cell(self, slot: int, cell: int) -> int:
        """Shared cell ``cell`` of ``slot`` (every worker writes it; see the docstring)."""
        return self._cells[slot * CELLS + cell]

    def set_cell(self, slot: int, cell: int, value: int) -> None:
        """Store shared cell ``cell`` of ``slot``, journaled (see the module docstring)."""
        self._cells[slot * CELLS + cell] = value
        self._note(slot)

    def mark(self, slot: int, cell: int, value: int) -> None:
        """Store shared cell ``cell`` of ``slot`` without a journal entry."""
        self._cells[slot * CELLS + cell] = value

    def heads(self) -> list[int]:
        """Every row's count of changes so far: where a new reader starts (:meth:`changes`)."""
        return [self._view[self._journal(row)] for row in range(self.rows)]

    def changes(self, seen: list[int]) -> list[int] | None:
        """The slots changed in any row since ``seen`` (each row's count of changes, as
        :meth:`heads` gave it and this call moves on), or ``None`` when some were lost.

        A slot may come more than once, or be one whose change a reader saw already: the
        reader re-reads the slots, which is harmless.
        """
        view = self._view
        slots: list[int] = []
        for row in range(self.rows):
            head = self._journal(row)
            done, last = view[head], seen[row]
            if done == last:
                continue
            if done - last > JOURNAL:
                return None
            first, end = head + 1 + (last & _MASK), head + 1 + (done & _MASK)
            if first < end:
                slots += view[first:end].tolist()
            else:  # the ring wrapped
                slots += view[first : head + 1 + JOURNAL].tolist()
                slots += view[head + 1 : end].tolist()
            if view[head] - last > JOURNAL:  # overwritten while read
                return None
            seen[row] = done
        return slots

    def close(self) -> None:
        self._cells.release()
        self._view.release()
        self._map.close()
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
