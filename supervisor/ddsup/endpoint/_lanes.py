"""The live set of lanes the endpoint routes to, and each lane's load.

The controller's feed (or a static list) changes the set at any time with
:meth:`LaneTable.set_ready`, :meth:`LaneTable.change`, :meth:`LaneTable.add` and
:meth:`LaneTable.remove`; the
request path only reads a per-name tuple that each change replaces (the lanes that
joined or left, not the whole table: :mod:`._lane_index`), so a lane that stops being
ready leaves the rotation at once while requests already sent to it finish on the
:class:`LaneState` they hold.

Each lane's identity and load are a :class:`~._lane_state.LaneState`; its requests in
flight count in a slot of a :class:`SharedCounts` table that every worker shares.

Requests are routed by name. A lane answers to its model (``[lane] model``), to the
names its unit gives (``served_names``: vLLM's ``--served-model-name`` aliases and LoRA
adapters) and to those its own ``GET /v1/models`` lists, which :mod:`._lane_names`
learns (:meth:`LaneTable.learn_names`) when the lane joins and every so often after.
A name, once known, stays known, so a request for it gets "no ready lane" (503) rather
than "unknown model" (404) while its lanes are away.

A lane that leaves the rotation is handed to ``on_retired`` (the controller's feed
watches it until nothing is in flight to it any more: ``ddsup restart`` drains a lane
that way before it stops it).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

import trio

from ddsup.endpoint._lane_index import NameIndex
from ddsup.endpoint._lane_state import LaneInfo, LaneState, Names
from ddsup.endpoint._shared_counts import ACTIVE, SLOTS, SharedCounts


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
    whose queue sample changed since it last looked (at most :data:`~._lane_state.SAMPLED_MAX`: more,
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
