"""The live set of lanes the endpoint routes to, and each lane's load.

The controller's feed (or a static list) changes the set at any time with
:meth:`LaneTable.set_ready`, :meth:`LaneTable.change`, :meth:`LaneTable.add` and
:meth:`LaneTable.remove`; the
request path only reads a per-model tuple that is rebuilt on each change, so a lane that
stops being ready leaves the rotation at once while requests already sent to it finish
on the :class:`LaneState` they hold.

A lane's requests in flight live in a :class:`SharedCounts` table, one slot per lane, so
that every worker of the endpoint sees the total over all workers. Slots are tied to the
lane's identity (instance and URL): a lane that leaves and comes back keeps its slot,
and requests still in flight on its old state count towards it, as they should.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from ddsup.endpoint._shared_counts import ACTIVE, SLOTS, SharedCounts
from ddsup.endpoint._upstream import ConnectionPool


@dataclass(frozen=True)
class LaneInfo:
    """One lane as the endpoint sees it: ``url`` is its base URL, ``http://host:port``."""

    instance: str
    model: str
    url: str


class LaneState:
    """A lane's load: requests in flight through the endpoint and its last queue sample."""

    __slots__ = ("counts", "info", "pool", "sampled_at", "slot", "waiting")

    def __init__(self, info: LaneInfo, max_idle: int, counts: SharedCounts, slot: int) -> None:
        self.info = info
        self.counts = counts
        self.slot = slot
        self.waiting: int | None = None  # vllm:num_requests_waiting, None = no good sample
        self.sampled_at = float("-inf")
        self.pool = ConnectionPool(info.url, max_idle)

    @property
    def outstanding(self) -> int:
        """Requests in flight to this lane through every worker of the endpoint."""
        return self.counts.total(self.slot)

    def begin(self) -> None:
        """One more request of this process in flight to the lane."""
        self.counts.add(self.slot, 1)

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


class LaneTable:
    """Ready lanes by model, plus every model the deployment is known to serve.

    A model stays known after its last lane leaves, so requests for it get "no ready
    lane" (503, retry later) rather than "unknown model" (404, a client bug).
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
        self._by_model: dict[str, tuple[LaneState, ...]] = {}
        self._by_slot: dict[int, LaneState] = {}
        self._known: set[str] = set(models)
        self._turns: dict[str, int] = {}
        self._slots: dict[LaneInfo, int] = {}
        self.on_change: Callable[[], None] | None = None  # called after every change
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
        for instance in list(self._lanes):
            self._drop(instance)
        for info in infos:
            self._lanes[info.instance] = self._state(info)
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
        for instance, state in list(self._lanes.items()):
            if wanted.get(instance) != state.info:
                self._drop(instance)
        for lane in wanted.values():
            if lane.instance not in self._lanes:
                self._lanes[lane.instance] = self._state(lane)
        self._rebuild()

    def change(self, added: Iterable[LaneInfo], removed: Iterable[str]) -> None:
        """Lanes joined (replacing any of the same instance name) and left, at once."""
        for instance in removed:
            if instance in self._lanes:
                self._drop(instance)
        for lane in added:
            if lane.instance in self._lanes:
                self._drop(lane.instance)
            self._lanes[lane.instance] = self._state(lane)
        self._rebuild()

    def add(self, lane: LaneInfo) -> None:
        """One lane became ready (a lane with the same instance name is replaced)."""
        if lane.instance in self._lanes:
            self._drop(lane.instance)
        self._lanes[lane.instance] = self._state(lane)
        self._rebuild()

    def _state(self, lane: LaneInfo) -> LaneState:
        return LaneState(lane, self._max_idle, self.counts, self.slot_of(lane))

    def remove(self, instance: str) -> None:
        """One lane stopped being ready; unknown names are ignored (the feed may repeat)."""
        if instance in self._lanes:
            self._drop(instance)
            self._rebuild()

    def declare_models(self, models: Iterable[str]) -> None:
        """Models the deployment serves even while none of their lanes is ready."""
        before = len(self._known)
        self._known.update(models)
        if len(self._known) != before:
            self._changed()

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def _drop(self, instance: str) -> None:
        self._lanes.pop(instance).pool.close_idle(retire=True)

    def _rebuild(self) -> None:
        by_model: dict[str, list[LaneState]] = {}
        for state in self._lanes.values():
            by_model.setdefault(state.info.model, []).append(state)
        self._by_model = {model: tuple(states) for model, states in by_model.items()}
        self._by_slot = {state.slot: state for state in self._lanes.values()}
        self._known.update(by_model)
        self._changed()

    def ready(self, model: str) -> tuple[LaneState, ...]:
        """The ready lanes of ``model`` (empty when none or unknown)."""
        return self._by_model.get(model, ())

    def is_known(self, model: str) -> bool:
        return model in self._known

    def known_models(self) -> list[str]:
        return sorted(self._known)

    def ready_models(self) -> list[str]:
        return sorted(self._by_model)

    def states(self) -> list[LaneState]:
        """Every ready lane (for the metrics sampler and /metrics)."""
        return list(self._lanes.values())

    def state_at(self, slot: int) -> LaneState | None:
        """The ready lane counted in ``slot``, if any."""
        return self._by_slot.get(slot)

    def infos(self) -> list[LaneInfo]:
        """Every ready lane's identity."""
        return [state.info for state in self._lanes.values()]

    def next_turn(self, model: str) -> int:
        """A per-model counter that rotates the choice among equally loaded lanes."""
        turn = self._turns.get(model, 0)
        self._turns[model] = turn + 1
        return turn

    def close(self) -> None:
        """Close every idle upstream connection (the server is shutting down)."""
        for state in self._lanes.values():
            state.pool.close_idle(retire=False)
