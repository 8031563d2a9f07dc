"""The ready lanes by each name they answer to, and by slot, kept as lanes join and leave.

The request path reads one tuple per name (:meth:`NameIndex.lanes`), so a change must
leave a new tuple, never edit one a request holds. Rebuilding all of them at every
change would walk every ready lane in Python, and in a start whose lanes become ready
one by one (the common case: a feed message of one or two lanes each) that is a walk of
the table per lane, quadratic in the fleet. So a join puts the lane at the end of each
of its names' tuples and a leave takes it out, each a copy of one tuple in C.

A name's tuple is in the order its lanes joined (a lane that joins again goes last),
which is what a rebuild from the table, whose dict keeps that order, gives too; a name a
ready lane gains later (:meth:`rename`) has it last.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Generic, Protocol, TypeVar


class Indexed(Protocol):
    """What the index needs of a lane: the names it answers to and its counting slot.
    Lanes are told apart by ``==``, which for :class:`~._lanes.LaneState` is identity."""

    names: frozenset[str]
    slot: int


Lane = TypeVar("Lane", bound=Indexed)


class NameIndex(Generic[Lane]):
    """Lanes by name (tuples, replaced on change) and by slot (see the module docstring)."""

    def __init__(self) -> None:
        self.by_name: dict[str, tuple[Lane, ...]] = {}
        self.by_slot: dict[int, Lane] = {}

    def lanes(self, name: str) -> tuple[Lane, ...]:
        return self.by_name.get(name, ())

    def join(self, lane: Lane) -> None:
        """``lane`` is ready: last in each of its names, and the one in its slot."""
        for name in lane.names:
            self._put(name, lane)
        self.by_slot[lane.slot] = lane

    def leave(self, lane: Lane) -> None:
        """``lane`` is not ready any more (a lane not in the index is ignored)."""
        for name in lane.names:
            self._take(name, lane)
        if self.by_slot.get(lane.slot) is lane:
            del self.by_slot[lane.slot]

    def rename(self, lane: Lane, names: frozenset[str]) -> None:
        """A ready lane now answers to ``names``: out of the names it lost, last in the
        ones it gained, where it was in the others."""
        for name in lane.names - names:
            self._take(name, lane)
        gained = names - lane.names
        lane.names = names
        for name in gained:
            self._put(name, lane)

    def rebuild(self, lanes: Iterable[Lane]) -> None:
        """Exactly ``lanes``, in their order: a whole new set at once."""
        by_name: dict[str, list[Lane]] = {}
        by_slot: dict[int, Lane] = {}
        for lane in lanes:
            for name in lane.names:
                by_name.setdefault(name, []).append(lane)
            by_slot[lane.slot] = lane
        self.by_name = {name: tuple(found) for name, found in by_name.items()}
        self.by_slot = by_slot

    def _put(self, name: str, lane: Lane) -> None:
        # a concatenation copies once; ``(*lanes, lane)`` goes through a list (2.7x slower)
        self.by_name[name] = self.by_name.get(name, ()) + (lane,)  # noqa: RUF005

    def _take(self, name: str, lane: Lane) -> None:
        lanes = self.by_name.get(name, ())
        try:  # found in C; a lane is equal only to itself (LaneState has no __eq__)
            at = lanes.index(lane)
        except ValueError:
            return
        if len(lanes) == 1:
            del self.by_name[name]
        else:
            self.by_name[name] = lanes[:at] + lanes[at + 1 :]
