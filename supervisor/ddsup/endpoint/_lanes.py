"""The lane table: the live set of lanes the endpoint routes to, each lane's load, and
the index the request path reads.

**The set.** The controller's feed (or a static list) changes it at any time with
:meth:`LaneTable.set_ready`, :meth:`LaneTable.change`, :meth:`LaneTable.add` and
:meth:`LaneTable.remove`; the request path only reads a per-name tuple that each change
replaces, so a lane that stops being ready leaves the rotation at once while requests
already sent to it finish on the :class:`LaneState` they hold. A lane that leaves the
rotation is handed to ``on_retired`` (the controller's feed watches it until nothing is
in flight to it any more: ``ddsup restart`` drains a lane that way before it stops it).

**One lane.** Its identity is a :class:`LaneInfo`; its load a :class:`LaneState`
(requests in flight through every worker, its last queue sample, its connections). Its
requests in flight live in a :class:`SharedCounts` table, one slot per lane, so that
every worker of the endpoint sees the total over all workers. Slots are tied to the
lane's identity (instance and URL): a lane that leaves and comes back keeps its slot,
and requests still in flight on its old state count towards it, as they should. The
slot's shared cells hold its passive-ejection state (:mod:`._ejection`).

**Names.** Requests are routed by name. A lane answers to its model (``[lane] model``),
to the names its unit gives (``served_names``: vLLM's ``--served-model-name`` aliases
and LoRA adapters) and to those its own ``GET /v1/models`` lists, which
:mod:`._lane_names` learns (:meth:`LaneTable.learn_names`) when the lane joins and every
so often after. A name, once known, stays known, so a request for it gets "no ready
lane" (503) rather than "unknown model" (404) while its lanes are away.

**The index** (:class:`NameIndex`): the ready lanes by each name and by slot. The request
path reads one tuple per name (:meth:`NameIndex.lanes`), so a change must leave a new
tuple, never edit one a request holds. Rebuilding all of them at every change would
walk every ready lane in Python, and in a start whose lanes become ready one by one (the
common case: a feed message of one or two lanes each) that is a walk of the table per
lane, quadratic in the fleet. So a join puts the lane at the end of each of its names'
tuples and a leave takes it out, each a copy of one tuple in C. A name's tuple is in the
order its lanes joined (a lane that joins again goes last), which is what a rebuild from
the table, whose dict keeps that order, gives too; a name a ready lane gains later
(:meth:`NameIndex.rename`) has it last.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

import trio

from ddsup.endpoint._shared_counts import ACTIVE, SLOTS, SharedCounts
from ddsup.endpoint._upstream import ConnectionPool

Names = tuple[str, ...]
SAMPLED_MAX = 1 << 14  # fresh samples a table notes for the choice's index, at most
# A lane's shared cells (SharedCounts.cell), its passive-ejection state (see ._ejection):
STREAK = 0  # failures in a row
EJECTED_UNTIL = 1  # microseconds of time.monotonic() until which it is out of the rotation
EJECTIONS = 2  # ejections since its last success (each doubles the next one's length)
BEGUN = 3  # 1 once a request began since the sampler last looked (see ._metrics_sampler)


@dataclass(frozen=True)
class LaneInfo:
    """One lane as the endpoint sees it: ``url`` is its base URL, ``http://host:port``.

    ``served_names``: the other names its unit says it answers to. ``api_key``: the key
    the endpoint sends it (the lane's own, never a client's; not in ``repr``).
    """

    instance: str
    model: str
    url: str
    served_names: tuple[str, ...] = ()
    api_key: str | None = field(default=None, repr=False)


class LaneState:
    """A lane's load: requests in flight through the endpoint and its last queue sample."""

    __slots__ = (
        "_begun",
        "_cell",
        "_ejected_until",
        "_mark",
        "_own",
        "_sampled",
        "_single",
        "_view",
        "counts",
        "info",
        "level",
        "names",
        "order",
        "pool",
        "sampled_at",
        "slot",
        "waiting",
    )

    def __init__(
        self,
        info: LaneInfo,
        max_idle: int,
        counts: SharedCounts,
        slot: int,
        learned: Names,
        sampled: list[LaneState] | None = None,
    ) -> None:
        self.info = info
        self.counts = counts
        self.slot = slot
        self.names = frozenset({info.model, *info.served_names, *learned})
        self.waiting: int | None = None  # vllm:num_requests_waiting, None = no good sample
        self.sampled_at = float("-inf")
        self.pool = ConnectionPool(info.url, max_idle, info.api_key)
        self.order = 0  # its place in the table's order, and ...
        self.level = -3  # ... in the choice's index (both kept by ._admission.Admission)
        self._sampled = sampled  # LaneTable.sampled
        self._cell = counts.cell
        self._mark = counts.mark
        # Read and written per request: indexes into the table, computed once.
        self._view = counts.view
        self._own = counts.own(slot)
        self._single = counts.rows == 1
        self._ejected_until = counts.cell_index(slot, EJECTED_UNTIL)
        self._begun = counts.cell_index(slot, BEGUN)

    @property
    def ejected_until(self) -> int:
        """Microseconds of :func:`time.monotonic` until which the lane is ejected."""
        return self._view[self._ejected_until]

    @property
    def outstanding(self) -> int:
        """Requests in flight to this lane through every worker of the endpoint."""
        if self._single:
            return self._view[self._own]
        return self.counts.total(self.slot)

    def begin(self) -> None:
        """One more request of this process in flight to the lane.

        It also marks the lane as begun (a plain store into a shared cell, in that order:
        see :meth:`take_begun`), so that the sampler, which samples a lane with nothing
        in flight rarely, samples it on its next tick even when the request is over by then.
        """
        self.counts.add(self.slot, 1)
        self._view[self._begun] = 1  # a mark, not journaled (SharedCounts.mark)

    def take_begun(self) -> bool:
        """Whether a request began since the last call (any worker's); clears the mark.

        A worker's mark that lands between the read and the clear is lost, but its
        request was counted before it was marked: a caller that reads
        :attr:`outstanding` after this call sees it unless it ended in between.
        """
        if not self._cell(self.slot, BEGUN):
            return False
        self._mark(self.slot, BEGUN, 0)
        return True

    def end(self) -> None:
        self.counts.add(self.slot, -1)

    def queue(self, now: float, stale_after: float) -> int:
        """Outstanding requests, or the lane's own waiting count when a fresh sample says more.

        ``now`` and the sample times are :func:`time.monotonic` (shared by processes).
        """
        waiting = self.waiting
        if waiting is not None and now - self.sampled_at <= stale_after:
            return max(self.outstanding, waiting)
        return self.outstanding

    def record_sample(self, waiting: int | None, now: float) -> None:
        """A good sample (``waiting``), or ``None`` when the lane's /metrics failed."""
        self.waiting = waiting
        self.sampled_at = now
        sampled = self._sampled
        if sampled is not None and len(sampled) < SAMPLED_MAX:
            sampled.append(self)


class Indexed(Protocol):
    """What the index needs of a lane: the names it answers to and its counting slot.
    Lanes are told apart by ``==``, which for :class:`LaneState` is identity."""

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


@dataclass
class Touched:
    """What changed in a table since its watcher last looked (:meth:`LaneTable.watch_changes`):
    the instances that joined, left or were replaced, and the lanes whose learned names
    changed. The watcher empties both."""

    instances: dict[str, None] = field(default_factory=dict)  # in the order first touched
    learned: dict[LaneInfo, None] = field(default_factory=dict)


class LaneTable:
    """Ready lanes by the names they answer to, plus every model and name known.

    A model stays known after its last lane leaves, so requests for it get "no ready
    lane" (503, retry later) rather than "unknown model" (404, a client bug); so does
    every other name a lane ever answered to.

    The index that chooses a lane for a request (:class:`~._admission.Admission`, one
    per process) follows the table's changes through :attr:`generation`, which every
    change of the set of lanes or of their names moves on, and :attr:`sampled`, the lanes
    whose queue sample changed since it last looked (at most :data:`~._lanes.SAMPLED_MAX`: more,
    and it re-reads them all).
    """

    def __init__(
        self,
        lanes: Iterable[LaneInfo] = (),
        *,
        models: Iterable[str] = (),
        max_idle: int = 256,
        counts: SharedCounts | None = None,
    ) -> None:
        self._max_idle = max_idle
        self.counts = counts or SharedCounts.private()
        self._lanes: dict[str, LaneState] = {}
        self._index: NameIndex[LaneState] = NameIndex()
        self._models: set[str] = set(models)
        self._names: set[str] = set(self._models)
        self._learned: dict[LaneInfo, Names] = {}  # from each lane's /v1/models (._lane_names)
        self._turns: dict[str, int] = {}
        self._slots: dict[LaneInfo, int] = {}
        self.on_change: Callable[[], None] | None = None  # called after every change
        self._change = trio.Event()
        self.on_retired: Callable[[LaneState], None] | None = None  # a lane left the rotation
        self.generation = 0
        self.sampled: list[LaneState] = []
        self._touch_watchers: list[Touched] = []  # see watch_changes
        self.set_ready(lanes)

    def slot_of(self, lane: LaneInfo) -> int:
        """The lane's slot in :attr:`counts`, the same whenever it comes back."""
        slot = self._slots.get(lane)
        if slot is None:
            slot = len(self._slots) + 1  # slot 0 is ACTIVE
            if slot >= SLOTS:
                raise RuntimeError(f"more than {SLOTS - 1} distinct lanes in one endpoint's life")
            self._slots[lane] = slot
        return slot

    def share_counts(self, counts: SharedCounts) -> None:
        """Count in ``counts`` from now on (before serving: the lanes' states are new)."""
        self.counts = counts
        infos = self.infos()
        self._index = NameIndex()  # rebuilt below: the drops need not take lanes out
        for instance in list(self._lanes):
            self._drop(instance)
        for info in infos:
            self._enter(info)
        self._rebuild()

    def use_slots(self, slots: Mapping[LaneInfo, int]) -> None:
        """Take slots assigned elsewhere (a worker takes its parent's)."""
        self._slots.update(slots)

    def begin_request(self) -> None:
        """One more request of this process in flight at all (for ``max_concurrent``)."""
        self.counts.add(ACTIVE, 1)

    def end_request(self) -> None:
        self.counts.add(ACTIVE, -1)

    def active(self) -> int:
        """Requests in flight through every worker of the endpoint."""
        return self.counts.total(ACTIVE)

    def set_ready(self, lanes: Iterable[LaneInfo]) -> None:
        """Make exactly ``lanes`` the ready set; lanes kept keep their load and connections."""
        wanted = {lane.instance: lane for lane in lanes}
        self._index = NameIndex()  # rebuilt below: the drops need not take lanes out
        for instance, state in list(self._lanes.items()):
            if wanted.get(instance) != state.info:
                self._drop(instance)
        for lane in wanted.values():
            if lane.instance not in self._lanes:
                self._enter(lane)
        self._rebuild()

    def change(self, added: Iterable[LaneInfo], removed: Iterable[str]) -> None:
        """Lanes joined (replacing any of the same instance name) and left, at once."""
        for instance in removed:
            if instance in self._lanes:
                self._drop(instance)
        for lane in added:
            self._join(lane)
        self._moved_on()

    def add(self, lane: LaneInfo) -> None:
        """One lane became ready (a lane with the same instance name is replaced)."""
        self._join(lane)
        self._moved_on()

    def _join(self, lane: LaneInfo) -> None:
        if lane.instance in self._lanes:
            self._drop(lane.instance)
        state = self._enter(lane)
        self._index.join(state)
        self._models.add(lane.model)
        self._names.update(state.names)

    def _enter(self, lane: LaneInfo) -> LaneState:
        """A new state for ``lane``, in the table and noted by every change watcher (the
        caller updates the index)."""
        learned = self._learned.get(lane, ())
        slot = self.slot_of(lane)
        state = LaneState(lane, self._max_idle, self.counts, slot, learned, self.sampled)
        self._lanes[lane.instance] = state
        for touched in self._touch_watchers:
            touched.instances[lane.instance] = None
        return state

    @contextlib.contextmanager
    def watch_changes(self) -> Iterator[Touched]:
        """What changes from now on, while the block lasts: the name learner asks the
        lanes that joined, the parent of the endpoint's workers sends them the lanes a
        change touched; neither walks the whole table per change."""
        touched = Touched()
        self._touch_watchers.append(touched)
        try:
            yield touched
        finally:
            self._touch_watchers = [w for w in self._touch_watchers if w is not touched]

    def state_of(self, instance: str) -> LaneState | None:
        """``instance``'s state in the rotation now, if it is in it."""
        return self._lanes.get(instance)

    def learned_names(self, lane: LaneInfo) -> Names | None:
        """What ``lane``'s ``/v1/models`` listed (``None``: not asked yet, or no answer)."""
        return self._learned.get(lane)

    def remove(self, instance: str) -> None:
        """One lane stopped being ready; unknown names are ignored (the feed may repeat)."""
        if instance in self._lanes:
            self._drop(instance)
            self._moved_on()

    def declare_models(self, models: Iterable[str]) -> None:
        """Models the deployment serves even while none of their lanes is ready."""
        before = len(self._models)
        self._models.update(models)
        if len(self._models) != before:
            self._names.update(self._models)
            self._changed()

    def declare_names(self, names: Iterable[str]) -> None:
        """Names known elsewhere (a worker takes its parent's)."""
        before = len(self._names)
        self._names.update(names)
        if len(self._names) != before:
            self._changed()

    def learn_names(self, lane: LaneInfo, names: Names | None) -> None:
        """What ``lane``'s ``/v1/models`` lists (``None``: asking failed; it was asked)."""
        if names is None:
            if lane not in self._learned:
                self._learned[lane] = ()
                self._learned_changed(lane)
                self._changed()
            return
        if self._learned.get(lane) == names:
            return
        self._learned[lane] = names
        self._learned_changed(lane)
        state = self._lanes.get(lane.instance)
        answers = frozenset({lane.model, *lane.served_names, *names})
        if state is not None and state.info == lane and answers != state.names:
            self._index.rename(state, answers)
            self._names.update(answers)
            self._moved_on()
        else:
            self._changed()  # /health waits for every ready lane to be asked

    def _learned_changed(self, lane: LaneInfo) -> None:
        for touched in self._touch_watchers:
            touched.learned[lane] = None

    def learned(self) -> dict[LaneInfo, Names]:
        """What every lane asked so far listed (a worker takes its parent's)."""
        return dict(self._learned)

    def learning(self) -> list[str]:
        """Ready lanes not asked for their names yet (``/health`` waits for them)."""
        return sorted(s.info.instance for s in self._lanes.values() if s.info not in self._learned)

    def _changed(self) -> None:
        self._change.set()
        self._change = trio.Event()
        if self.on_change is not None:
            self.on_change()

    async def wait_changed(self) -> None:
        """Until the table changes next."""
        await self._change.wait()

    def _drop(self, instance: str) -> None:
        state = self._lanes.pop(instance)
        self._index.leave(state)
        for touched in self._touch_watchers:
            touched.instances[instance] = None
        state.pool.close_idle(retire=True)
        if self.on_retired is not None:
            self.on_retired(state)

    def serves(self, instance: str) -> bool:
        """Whether ``instance`` is in the rotation now."""
        return instance in self._lanes

    def _rebuild(self) -> None:
        """The index from the whole table (a new set at once: :meth:`set_ready`)."""
        self._index.rebuild(self._lanes.values())
        for state in self._lanes.values():
            self._models.add(state.info.model)
            self._names.update(state.names)
        self._moved_on()

    def _moved_on(self) -> None:
        """The set of lanes or their names changed: a new generation (the choice's index
        re-reads the table), and whoever waits for a change is told."""
        self._names.update(self._models)
        self.generation += 1
        self._changed()

    def ready(self, name: str) -> tuple[LaneState, ...]:
        """The ready lanes that answer to ``name`` (empty when none or unknown)."""
        return self._index.lanes(name)

    def is_known(self, name: str) -> bool:
        return name in self._names

    def known_models(self) -> list[str]:
        """The models of the deployment (``[lane] model``), ready or not."""
        return sorted(self._models)

    def known_names(self) -> list[str]:
        """Every name a request may use: models, aliases, adapters."""
        return sorted(self._names)

    def ready_models(self) -> list[str]:
        return sorted({state.info.model for state in self._lanes.values()})

    def ready_names(self) -> list[str]:
        """Every name a ready lane answers to (``GET /v1/models``)."""
        return sorted(self._index.by_name)

    def states(self) -> list[LaneState]:
        """Every ready lane (for the metrics sampler and /metrics)."""
        return list(self._lanes.values())

    def state_at(self, slot: int) -> LaneState | None:
        """The ready lane counted in ``slot``, if any."""
        return self._index.by_slot.get(slot)

    def infos(self) -> list[LaneInfo]:
        """Every ready lane's identity."""
        return [state.info for state in self._lanes.values()]

    def next_turn(self, name: str) -> int:
        """A per-name counter that rotates the choice among equally loaded lanes."""
        turn = self._turns.get(name, 0)
        self._turns[name] = turn + 1
        return turn

    def close(self) -> None:
        """Close every idle upstream connection (the server is shutting down)."""
        for state in self._lanes.values():
            state.pool.close_idle(retire=False)
